"""Credentials come from the environment only; configuration names the variable, never the value.

Two guards: `reject_inline_secrets` refuses a configuration that holds a secret literally (so it
cannot end up in a repository, a log or an error), and `Credential` carries a secret read from
the environment without ever showing it in a repr.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from probes.errors import ProbeConfigError

# Normalised key names (lower case, "-" as "_") that can only hold a secret.
_SECRET_KEY = re.compile(r"token|api_?key|password|passwd|secret|authorization|credential")


def reject_inline_secrets(table: Mapping[str, Any], where: str) -> None:
    """Raise if `table` (recursively) holds a literal secret; the error never shows the value."""
    for key, value in table.items():
        if isinstance(value, Mapping):
            reject_inline_secrets(value, f"{where}.{key}")
            continue
        name = str(key).lower().replace("-", "_")
        if _SECRET_KEY.search(name) and not name.endswith("_env"):
            raise ProbeConfigError(
                f"{where}: {key!r} looks like an inline secret; configuration must not hold "
                f"credentials: put the value in an environment variable and name it with "
                f"'token_env' (for a header, 'auth_header' + 'token_env')")
        if isinstance(value, str) and "://" in value and urlsplit(value).password is not None:
            raise ProbeConfigError(
                f"{where}: {key!r} is a URL with a password in it; remove it and use 'token_env'")


@dataclass(frozen=True, slots=True)
class Credential:
    """A secret taken from the environment variable `env_name`; `value` is None when unset."""

    env_name: str
    value: str | None = field(default=None, repr=False, compare=False)

    @classmethod
    def from_env(cls, env_name: str, env: Mapping[str, str]) -> Credential:
        return cls(env_name, env.get(env_name) or None)

    def headers(self, header: str | None) -> dict[str, str]:
        """The auth header: the raw value in `header`, or `Authorization: Bearer` by default."""
        if self.value is None:
            return {}
        if header is None:
            return {"Authorization": f"Bearer {self.value}"}
        return {header: self.value}
