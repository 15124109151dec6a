"""The settings of ``worldgraph.world``: the world-model pipeline (history, the LLM, the delta's
size, the background workers and their leases). A part of ``WorldGraphConfig`` (settings.py)."""

from __future__ import annotations

from pydantic import BaseModel, Field


class WorldSettings(BaseModel):
    """The world graph's pipeline: rounds, extraction, workers."""

    # World graph
    app_name: str = "general"
    history_rounds: int = Field(5, ge=0)
    llm_model: str = "gpt-4o-mini"
    llm_timeout_seconds: float = Field(60.0, gt=0)
    llm_max_retries: int = Field(0, ge=0)
    max_delta_items: int = Field(500, gt=0)
    # background threads extracting scene packets (merges place facts by round time, so the
    # graph does not depend on which answer arrives first)
    world_workers: int = Field(1, ge=1, le=64)
    # how long update_world waits for a packet another worker holds before it gives up
    update_wait_seconds: float = Field(600.0, ge=0)
    summary_max_items: int = Field(40, gt=0)
    # False: flagged packets stay pending in the store for `worldgraph worker` processes instead of
    # this process's background threads (update_world and retry still merge on demand)
    world_background_updates: bool = True
    # A packet being extracted is leased to its worker, which renews the lease every third of this;
    # another worker takes a packet whose lease ran out (its worker died), never a live one's.
    worker_lease_seconds: float = Field(30.0, ge=1)
    # World search (search_world, context): how many candidates the vector and the BM25 search
    # each give; how much of the relevance of the things a fact links (its ends, a state's entity,
    # a rule's nodes) a fact gains when the query names them; what a record that is not valid
    # at the asked moment (now, or as_of) loses, so that current facts rank above closed ones
    world_search_pool: int = Field(60, ge=1, le=1000)
    world_search_link_weight: float = Field(0.3, ge=0.0, le=1.0)
    world_search_closed_penalty: float = Field(0.3, ge=0.0, le=2.0)
    # ... and what a row saying what came after an action loses when its record no longer holds
    world_search_history_penalty: float = Field(0.1, ge=0.0, le=2.0)
    # ... and what a row gains when the query names its action word for word
    world_search_action_weight: float = Field(0.2, ge=0.0, le=1.0)
    # ... and what a row gains when it is of the kind the question's form asks for (where X is: a
    # fact placing X; what C holds: a fact placing something in C; what an action did: a change
    # or a rule; world/search/forms.py)
    world_search_form_weight: float = Field(0.3, ge=0.0, le=1.0)
    # context(): the share of the token budget the world's facts and rules take before the
    # episodes (whatever the episodes leave goes to more facts)
    context_world_share: float = Field(0.6, ge=0.0, le=1.0)
