"""worldgraph over the network: REST API (FastAPI), MCP server, and the world-graph page."""
