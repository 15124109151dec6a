"""The graph delta: parse, validate and salvage what an LLM (or a caller) returns."""
