"""Credentials come from the environment only; configuration names the variable, never the value.

Two guards: `reject_inline_secrets` refuses a configuration that holds a secret literally (so it
cannot end up in a repository, a log or an error), and `ProviderCredential` carries a secret
read from the environment without ever showing it in a repr.
"""

from __future__ import annotations

import base64
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


class MissingCredential(Exception):
    """A credential's environment variable is unset; the message names the variable only."""


@dataclass(frozen=True, slots=True)
class ProviderCredential:
    """How a probe logs in, read from the environment at every call, so a rotated secret is
    used from the next call on without a restart.

    `scheme` is `bearer` (`Authorization: Bearer <token>`), `header` (the raw token in
    `header`, e.g. Postmark's `X-Postmark-Server-Token`) or `basic` (HTTP Basic with the user
    from `username_env`, e.g. Twilio's Account SID, and the token as the password).
    """

    token_env: str
    env: Mapping[str, str] = field(repr=False, compare=False)
    scheme: str = "bearer"
    header: str | None = None
    username_env: str | None = None

    @property
    def env_names(self) -> tuple[str, ...]:
        return (self.token_env,) if self.username_env is None else (
            self.username_env, self.token_env)

    def unset(self) -> tuple[str, ...]:
        """The variables this credential reads that are unset or empty now: with any of them
        missing the probe sends nothing (`headers` raises) and reads `unavailable`."""
        return tuple(name for name in self.env_names if not self.env.get(name))

    def _read(self, name: str) -> str:
        value = self.env.get(name)
        if not value:
            raise MissingCredential(f"credentials not set: {name}")
        return value

    def headers(self) -> dict[str, str]:
        """The auth header for this call; raises `MissingCredential` when a variable is unset."""
        token = self._read(self.token_env)
        if self.scheme == "basic":
            assert self.username_env is not None
            pair = f"{self._read(self.username_env)}:{token}".encode()
            return {"Authorization": "Basic " + base64.b64encode(pair).decode("ascii")}
        if self.scheme == "header":
            assert self.header is not None
            return {self.header: token}
        return {"Authorization": f"Bearer {token}"}
