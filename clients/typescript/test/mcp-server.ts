/** An MCP server with a `charge` tool, connected in process (the SDK's in-memory transport) to
 * a client: the upstream attaches what the gated client put in `_meta` to the provider's
 * request, as an upstream behind the Python MCP proxy does (tests/mcp_charges.py). */
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { InMemoryTransport } from "@modelcontextprotocol/sdk/inMemory.js";
import { McpServer } from "@modelcontextprotocol/sdk/server/mcp.js";
import { z } from "zod";

import { KEY_META, OPERATION_META } from "../src/adapters/mcp.js";
import type { Payments } from "./charges.js";

export async function connectedClient(payments: Payments): Promise<Client> {
  const server = new McpServer({ name: "payments", version: "1.0.0" });
  server.registerTool("charge", {
    description: "Charge an order",
    inputSchema: { order: z.string(), amount: z.number() },
  }, async (args, extra) => {
    const meta = extra._meta ?? {};
    const key = meta[KEY_META];
    const charged = await payments.charge(args, {
      operationId: String(meta[OPERATION_META]),
      idempotencyKey: typeof key === "string" ? key : null,
    });
    return { content: [{ type: "text", text: JSON.stringify(charged) }],
      structuredContent: charged };
  });
  // A tool whose upstream answers with its own error (isError): nothing charged.
  server.registerTool("charge_declined", {
    description: "Charge an order with a card that is declined",
    inputSchema: { order: z.string(), amount: z.number() },
  }, async () => ({ content: [{ type: "text", text: "card_declined" }], isError: true }));
  const [clientSide, serverSide] = InMemoryTransport.createLinkedPair();
  await server.connect(serverSide);
  const client = new Client({ name: "worker", version: "1.0.0" });
  await client.connect(clientSide);
  return client;
}
