"""The service: a REST API (FastAPI) and an MCP server over ``WorldModel``, with API keys.

``worldgraph serve`` runs both (``server.app.create_app``); ``worldgraph mcp`` serves MCP over
stdio (``server.mcp_server.build_mcp``); ``worldgraph keys`` manages the keys (``server.keys``).
Nothing here holds business logic: each route or tool calls one facade method.
"""
