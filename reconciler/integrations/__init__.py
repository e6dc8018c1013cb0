"""Adapters that put agent frameworks' tool calls through `reconciler.effect`, each at the
framework's own extension point (docs/integrations/). Each needs its framework installed:
`pip install 'effect-reconciler[openai-agents]'` (or `[langgraph]`, `[pydantic-ai]`,
`[anthropic]`, and the durable-execution engines' `[dbos]`, `[temporal]`); nothing here imports
a framework until its adapter module is imported."""
