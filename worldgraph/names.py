"""The one rule for names that become folders and keys: tenants and environments.

A tenant names a folder of every snapshot (``<root>/<tenant>/<app>/...``) and an environment
names the folder below it, so both are plain identifiers: 1-128 letters, digits, ``_``, ``-`` or
``.``, starting with a letter or a digit. Every layer (service, world updater, server, API keys)
checks them here, with this rule.
"""

from __future__ import annotations

import re
from typing import Any

from worldgraph.errors import InvalidInputError

__all__ = ["NAME_RE", "NAME_RULE", "check_name", "check_tenant", "check_env"]

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
