"""`reconciler mcp-proxy`: an MCP server that fronts an upstream one and puts every tools/call
through the reconciler (docs/integrations/mcp.md)."""
