"""The recall pipeline: query parsing, candidates, relevance, scoring and diversity."""
