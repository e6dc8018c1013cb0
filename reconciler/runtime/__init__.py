"""The agent runtime: durable runs whose side effects go through the reconciler."""
