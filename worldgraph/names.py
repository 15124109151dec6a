"""The one rule for names that become folders and keys: tenants and environments.

A tenant names a folder of every snapshot (``<root>/<tenant>/<app>/...``) and an environment
names the folder below it, so both are plain identifiers: 1-128 letters, digits, ``_``, ``-`` or
``.``, starting with a letter or a digit. Every layer (service, world updater, server, API keys)
checks them here, with this rule.
"""

from __future__ import annotations

import re
from typing import Any, Protocol

from worldgraph.errors import InvalidInputError, NotFoundError


class HasEnvironments(Protocol):
    """What ``require_environment`` needs of a store (both stores have it); named here so the
    ground floor does not import the store layer."""

    def environments(self, tenant_id: str) -> list[str]: ...

__all__ = ["NAME_RE", "NAME_RULE", "KNOWN_SHOWN", "check_name", "check_tenant", "check_env", "known_names",
           "require_environment"]

KNOWN_SHOWN = 20  # known names listed in an unknown name's error, at most

NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$")
NAME_RULE = "must be 1-128 characters of letters, digits, '_', '-' or '.', starting with a letter or digit"


def check_name(value: Any, field: str, why: str = "") -> str:
    """``value`` if it is such a name, else InvalidInputError naming ``field`` and the rule."""
    if not isinstance(value, str) or not NAME_RE.fullmatch(value):  # match() would let 'acme\n' through
        raise InvalidInputError(field, NAME_RULE + (f" ({why})" if why else ""), value)
    return value


def check_tenant(tenant_id: Any, field: str = "tenant_id") -> str:
    """A tenant id (it names a folder in exports)."""
    return check_name(tenant_id, field)


def check_env(env_name: Any, field: str = "env_name") -> str:
    """An environment name (it names a folder of the snapshot)."""
    return check_name(env_name, field, "it names a folder of the snapshot")


# One rule for unknown names, on every surface (Python, REST, MCP, CLI): NotFoundError (404
# not_found) whose message names the known ones.
def known_names(names: list[str], what: str, hint: str) -> str:
    """``known <what>: a, b, c`` (at most KNOWN_SHOWN, then ``...``), or ``none yet (<hint>)``."""
    if not names:
        return f"known {what}: none yet ({hint})"
    more = ", ..." if len(names) > KNOWN_SHOWN else ""
    return f"known {what}: " + ", ".join(names[:KNOWN_SHOWN]) + more


def require_environment(store: HasEnvironments, tenant_id: str, env_name: str, field: str = "env_name") -> None:
    """Nothing if the tenant has the environment (a graph or a scene of it), else NotFoundError
    naming the ones it has."""
    known = store.environments(tenant_id)
    if env_name not in known:
        raise NotFoundError("environment", env_name, f"tenant {tenant_id!r} has no such environment; " + known_names(
            known, "environments", "grow one with observe_round or apply_delta: `worldgraph run`, "
            "`worldgraph delta apply`"), field=field)
