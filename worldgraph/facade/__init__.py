"""The bodies of ``WorldModel``'s methods (worldgraph/service.py), by path.

``service.py`` keeps the one typed facade class with every method's signature and docstring; a
method checks what the facade owns (the tenant, that the model is writable) and hands the rest to
one of these, which are given the parts they need (the store, the index, the settings), never the
facade:

- opening.py: the parts of ``WorldModel.open`` (settings, embedder, store, index) and closing the store
- recording.py: ``Recorder``: record experiences and conversations, re-index, rebuild the index
- reading.py: episodes by id, by agent and by page; readiness; stats
- lifecycle.py: ``Lifecycle``: forget an episode, an environment or a tenant; purge
- environments.py: the world path beside the world updater: packets checked, graphs read, environments listed
"""
