"""The pure merge engine: (GraphView, delta, scene, now) -> (MergePlan, MergeReport).

``engine.plan_merge`` is the entry point; the other modules are its steps, functions over one
``state.MergeState`` (engine.py's docstring lists them in the order they run)."""
