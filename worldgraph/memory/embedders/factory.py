"""Which embedder a configuration (and an existing index) asks for.

``auto`` and ``local`` pick the best installed local model (see :mod:`.catalog`), except for a
folder whose index an installed local model built: that folder keeps its model (or another
runner of the same model), so changing the default never breaks existing data; ``worldgraph
reindex`` rebuilds the index with the default. ``auto`` falls back to the hashing embedder when
no model is installed; ``local`` refuses instead.
"""

from __future__ import annotations

import logging
import re
from typing import TYPE_CHECKING, Any

from worldgraph.errors import InvalidInputError
from worldgraph.memory.embedders.base import Embedder
from worldgraph.memory.embedders.catalog import LOCAL_MODELS, LocalModel, best_available, local_model, model_named
from worldgraph.memory.embedders.hashing import HashingEmbedder
from worldgraph.memory.embedders.openai_compat import OpenAIEmbedder

if TYPE_CHECKING:  # pragma: no cover
    from worldgraph.config import WorldGraphConfig

log = logging.getLogger("worldgraph.memory.embeddings")

_HASHING_NAME = re.compile(r"^hashing-v1-(\d+)$")
_warned: set[str] = set()


def make_embedder(config: WorldGraphConfig, built_by: str | None = None) -> Embedder:
    """The embedder ``config.embedding_provider`` asks for.

    ``built_by`` is the name recorded beside an existing index (None for a new or rebuilt one):
    with ``auto`` / ``local`` that folder keeps the model that built it while it is installed.
    """
    provider = config.embedding_provider
    if provider == "openai":
        return OpenAIEmbedder(config.embedding_model, config.embedding_dimensions)
    if provider == "hashing":
        return HashingEmbedder(384)
    if provider not in ("auto", "local"):
        raise InvalidInputError("embedding_provider", f"unknown provider {provider!r} (auto, openai, local, hashing)")
    workers = config.embedding_threads or None
    model = _pick_local(config, built_by)
    if model is not None:
        return model.build(workers)  # type: ignore[no-any-return]
    hint = LOCAL_MODELS[0].install
    if provider == "local":
        raise InvalidInputError("embedding_provider", f"'local' needs an installed local model: {hint}")
    hashed = _HASHING_NAME.match(built_by or "")
    if hashed:  # a folder indexed by the hashing embedder keeps it
        return HashingEmbedder(int(hashed.group(1)))
    _warn_once("fallback", "no embedding model installed; using the hashing embedder (keyword overlap only). "
               "For semantic recall: %s, or set WORLDGRAPH_EMBEDDING_PROVIDER=openai", hint)
    return HashingEmbedder(384)


def index_name(name: str, built_by: str | None) -> str:
    """The name to open an index with, for an embedder called ``name``: the name the index was
    built with when both are runners of the same local model (same family), so the index stays
    labelled with the model that built it; else ``name`` itself (and an index built by another
    model refuses it, suggesting `worldgraph reindex`)."""
    stored, mine = model_named(built_by), model_named(name)
    if stored is not None and mine is not None and stored.family == mine.family:
        return stored.name
    return name


def _pick_local(config: WorldGraphConfig, built_by: str | None) -> LocalModel | None:
    if config.embedding_local_model != "auto":
        chosen = local_model(config.embedding_local_model)
        if not chosen.available():
            raise InvalidInputError("embedding_local_model", f"{chosen.key} is not installed: {chosen.install}")
        return chosen
    best = best_available()
    stored = model_named(built_by)
    if stored is not None:
        same = best_available(stored.family)
        if same is not None:
            if best is not None and best.family != same.family:
                _warn_once(f"keep:{stored.name}", "this index was built by %s, which is kept for it; "
                           "`worldgraph reindex` rebuilds it with the default %s", stored.name, best.key)
            elif same.name != stored.name:
                log.info("index built by %s: searching and extending it with %s (the same model)",
                         stored.name, same.name)
            return same
    if built_by is not None and best is not None and _HASHING_NAME.match(built_by) and \
            config.embedding_provider == "auto":
        _warn_once(f"keep:{built_by}", "this index was built by the hashing embedder, which is kept for it; "
                   "`worldgraph reindex` rebuilds it with the local model %s", best.key)
        return None
    return best


def _warn_once(key: str, msg: str, *args: Any) -> None:
    if key not in _warned:
        _warned.add(key)
        log.warning(msg, *args)
