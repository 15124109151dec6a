"""The service: a REST API (FastAPI) and an MCP server over ``WorldModel``, with API keys, and
the world-graph page.

``worldgraph serve`` runs both (``server.app.create_app``); ``worldgraph mcp`` serves MCP over
stdio (``server.mcp_server.build_mcp``); ``worldgraph keys`` manages the keys (``server.keys``);
``server.view.render_view`` draws one environment's graph as a self-contained HTML page.
Nothing here holds business logic: each route or tool calls one facade method.
"""
