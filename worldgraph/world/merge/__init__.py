"""The pure merge engine: (GraphView, delta, scene, now) -> (MergePlan, MergeReport)."""
