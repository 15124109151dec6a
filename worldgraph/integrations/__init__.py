"""worldgraph as the memory of the agent frameworks people already use (optional extras):

- ``worldgraph.integrations.langchain``: ``WorldgraphRetriever``, ``WorldgraphChatMessageHistory``
  (``pip install 'worldgraph[langchain]'``)
- ``worldgraph.integrations.langgraph``: ``WorldgraphStore``, a LangGraph ``BaseStore``
  (``worldgraph[langgraph]``)
- ``worldgraph.integrations.llama_index``: ``WorldgraphRetriever``, ``WorldgraphMemoryBlock``
  (``worldgraph[llamaindex]``)
- ``worldgraph.integrations.openai_agents``: ``WorldgraphSession``, ``worldgraph_tools()``
  (``worldgraph[openai-agents]``)

Each is a thin module over the public API (``WorldModel`` / ``AsyncWorldModel``), so what holds
for worldgraph holds through them: the tenant is fixed when an adapter is made, never taken from
what a model writes; deleting is a forget (purged like any other); async methods await
``AsyncWorldModel`` and never block the event loop; errors are worldgraph's errors. This package
imports no framework: each module imports its own when it is imported.
"""
