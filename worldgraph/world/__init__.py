"""The world-model pipeline: curiosity, rounds, scene packets, extraction, summary, worker,
delta parsing and the merge engine."""
