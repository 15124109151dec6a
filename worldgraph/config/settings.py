"""WorldGraphConfig: every setting, read by one pydantic-settings model.

Each field can be set by an environment variable ``WORLDGRAPH_<FIELD>`` (upper case), e.g.
``WORLDGRAPH_MIN_SIMILARITY_THRESHOLD=0.3`` (``null`` unsets an optional one); the usual
``NEO4J_URI`` / ``NEO4J_USER`` (``NEO4J_USERNAME``) / ``NEO4J_PASSWORD`` / ``NEO4J_DATABASE`` are
honoured after their ``WORLDGRAPH_NEO4J_*`` names. Explicit keyword arguments win over the
environment, which wins over the defaults. The fields are declared by area in the modules beside
this one (memory.py, storage.py, world.py, server.py); the variables are read through
environment.py, the one module that touches the process environment.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import ValidationError
from pydantic.fields import FieldInfo
from pydantic_settings import (
    BaseSettings,
    EnvSettingsSource,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
)

try:  # where pydantic-settings keeps it since 2.7; before, in pydantic_settings.sources
    from pydantic_settings.sources.utils import parse_env_vars
except ImportError:  # pragma: no cover - older pydantic-settings
    from pydantic_settings.sources import parse_env_vars  # type: ignore[attr-defined,no-redef]

from worldgraph.config.environment import current_variables, reading
from worldgraph.config.memory import EmbeddingSettings, ReadinessSettings, RecallSettings
from worldgraph.config.server import LimitSettings, ServerSettings
from worldgraph.config.storage import Neo4jSettings, StorageSettings, UpkeepSettings
from worldgraph.config.world import WorldSettings
from worldgraph.errors import InvalidInputError

ENV_PREFIX = "WORLDGRAPH_"

# The usual names of the Neo4j variables, read after WORLDGRAPH_NEO4J_* (the first one set wins).
NEO4J_VARIABLES: tuple[tuple[str, str], ...] = (
    ("NEO4J_URI", "neo4j_uri"), ("NEO4J_USER", "neo4j_user"), ("NEO4J_USERNAME", "neo4j_user"),
    ("NEO4J_PASSWORD", "neo4j_password"), ("NEO4J_DATABASE", "neo4j_database"))

# Settings that are secrets: never written where another user of the machine can read them. A
# child process's command line is one such place (/proc/PID/cmdline is readable by every user),
# so the config a child gets there leaves these out (``child_config_json``). A new secret setting
# goes here.
SECRET_SETTINGS: frozenset[str] = frozenset({"neo4j_password"})


# The settings are grouped by area, each group a model of its own module. pydantic lists the fields
# of the bases from the last base to the first, so the groups are named last to first: the fields
# keep the order Embedding, Recall, Readiness, Storage, World, Upkeep, Server, Limits, Neo4j (the
# order of the JSON Schema, of a dump, and of the errors when several values are bad).
class WorldGraphConfig(Neo4jSettings, LimitSettings, ServerSettings, UpkeepSettings, WorldSettings, StorageSettings,
                       ReadinessSettings, RecallSettings, EmbeddingSettings, BaseSettings):
    """Every setting of the original WorldModelConfig, with its defaults, and the rest of ours."""

    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX, case_sensitive=False, extra="forbid",
                                      validate_assignment=True, env_parse_none_str="null")

    @classmethod
    def settings_customise_sources(
        cls, settings_cls: type[BaseSettings], init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource, dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        """Keywords, then WORLDGRAPH_* variables, then the usual Neo4j names; no .env file (a
        stray one in the working folder must not change where data goes)."""
        return init_settings, _Variables(settings_cls), _Neo4jVariables(settings_cls)

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, **overrides: Any) -> WorldGraphConfig:
        """Defaults, then ``WORLDGRAPH_*`` variables (of ``environ``, default ``os.environ``), then
        ``overrides``. A bad value is an InvalidInputError naming the variable or keyword to fix."""
        with reading(environ):
            try:
                return cls(**overrides)
            except ValidationError as exc:
                raise _config_error(exc, overrides, current_variables()) from exc

    def child_config_json(self) -> str:
        """This config as JSON for a child process's command line: every setting but the secrets
        (``SECRET_SETTINGS``), which the child gets at their defaults."""
        return self.model_dump_json(exclude=set(SECRET_SETTINGS))


class _Variables(EnvSettingsSource):
    """The WORLDGRAPH_* variables, of the mapping from_env was given or of os.environ."""

    def _load_env_vars(self) -> Mapping[str, str | None]:
        return parse_env_vars(current_variables(), self.case_sensitive, self.env_ignore_empty, self.env_parse_none_str)


class _Neo4jVariables(PydanticBaseSettingsSource):
    """NEO4J_URI and friends (what Neo4j's own tools read), below their WORLDGRAPH_ names."""

    def get_field_value(self, field: FieldInfo, field_name: str) -> tuple[Any, str, bool]:
        return None, field_name, False  # __call__ gives every value at once

    def __call__(self) -> dict[str, Any]:
        environ, out = current_variables(), {}
        for var, name in NEO4J_VARIABLES:
            if var in environ and name not in out:
                out[name] = environ[var]
        return out


def _config_error(exc: ValidationError, overrides: Mapping[str, Any], environ: Mapping[str, str]) -> InvalidInputError:
    """The first problem, naming where the bad value came from: a keyword, a WORLDGRAPH_*
    variable (or a NEO4J_* one), and how to fix it."""
    err = exc.errors()[0]
    field = ".".join(str(p) for p in err["loc"]) or "config"
    variable = ENV_PREFIX + field.upper()
    if err["type"] == "extra_forbidden":
        return InvalidInputError(f"config.{field}", "is not a setting of WorldGraphConfig (check the spelling)")
    if field in overrides:
        where = f"the keyword argument {field}={overrides[field]!r}"
    elif variable in environ or variable.lower() in {k.lower() for k in environ}:
        where = f"the environment variable {variable}={err.get('input')!r}: fix or unset it"
    else:
        usual = [v for v, name in NEO4J_VARIABLES if name == field and v in environ]
        where = (f"the environment variable {usual[0]}={err.get('input')!r}: fix or unset it" if usual else
                 f"set it with {variable} or a keyword argument")
    return InvalidInputError(f"config.{field}", f"{err['msg']} ({where})", err.get("input"))

