/** Models scripted through each framework's own model interface: the tool loops under test are
 * the frameworks' real ones, only the model's answers are fixed. */
import { Usage, type AgentOutputItem, type Model, type ModelResponse } from "@openai/agents";
import { MockLanguageModelV4 } from "ai/test";

import { ARGS } from "./charges.js";

const usage = {
  inputTokens: { total: 1, noCache: 1, cacheRead: 0, cacheWrite: 0 },
  outputTokens: { total: 1, text: 1, reasoning: 0 },
};

/** An `ai` model that calls `charge` with ARGS once per tool call id, then says it is done. */
export function aiModelCallingCharge(...toolCallIds: string[]): MockLanguageModelV4 {
  return new MockLanguageModelV4({ doGenerate: [
    ...toolCallIds.map((toolCallId) => ({
      content: [{ type: "tool-call" as const, toolCallId, toolName: "charge",
        input: JSON.stringify(ARGS) }],
      finishReason: { unified: "tool-calls" as const, raw: undefined }, usage, warnings: [],
    })),
    { content: [{ type: "text" as const, text: "Charged." }],
      finishReason: { unified: "stop" as const, raw: undefined }, usage, warnings: [] },
  ] });
}

/** An Agents SDK model that calls `charge` with ARGS once per call id, then says it is done. */
export class ScriptedModel implements Model {
  readonly #turns: AgentOutputItem[][];

  constructor(...callIds: string[]) {
    this.#turns = [
      ...callIds.map((callId, i): AgentOutputItem[] => [{ type: "function_call", id: `fc_${i}`,
        callId, name: "charge", arguments: JSON.stringify(ARGS), status: "completed" }]),
      [{ type: "message", id: "m_1", role: "assistant", status: "completed",
        content: [{ type: "output_text", text: "Handled." }] }],
    ];
  }

  async getResponse(): Promise<ModelResponse> {
    return { output: this.#turns.shift() ?? [], usage: new Usage(), responseId: "r" };
  }

  getStreamedResponse(): AsyncIterable<never> {
    throw new Error("not streamed");
  }
}
