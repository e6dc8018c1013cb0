"""Sealing what agent runs remember: their conversation, unreadable in the store.

A run can only be resumed from its conversation (the task, the model's messages, the tool
arguments and results), yet the store must never hold bodies or arguments readable. So every
run event's payload is sealed with Fernet (AES-128-CBC with HMAC-SHA256; tampering is detected
on open) under a key from the environment; kinds, sequence numbers and times stay in the clear.

RECONCILER_RUN_KEY holds one key, or several separated by commas: the first seals, all of them
open, so a key can be rotated by putting the new one first and dropping the old one once no
run sealed with it is needed any more.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence

from cryptography.fernet import Fernet, InvalidToken, MultiFernet

from reconciler.core.errors import RunKeyError

KEY_ENV = "RECONCILER_RUN_KEY"


def new_key() -> str:
    return Fernet.generate_key().decode("ascii")


class Sealer:
    """Seals and opens run event payloads with the run keys."""

    def __init__(self, keys: Sequence[str]) -> None:
        if not keys:
            raise RunKeyError(f"no run key given: set {KEY_ENV}")
        try:
            self._fernet = MultiFernet([Fernet(key.strip().encode("ascii")) for key in keys])
        except (ValueError, UnicodeEncodeError):
            # Never echo the key: say what is wrong with it, not what it is.
            raise RunKeyError(f"{KEY_ENV} holds something that is not a Fernet key (32 bytes, "
                              "url-safe base64); `reconciler run-key` prints a new one") from None

    @classmethod
    def from_env(cls, env: Mapping[str, str] = os.environ) -> Sealer:
        value = env.get(KEY_ENV, "")
        if not value.strip():
            raise RunKeyError(
                f"{KEY_ENV} is not set: agent runs keep their conversation sealed in the store "
                "and need a key. Generate one with `reconciler run-key`, keep it with your other "
                "secrets, and give every worker and sidecar of the fleet the same one.")
        return cls([key for key in value.split(",") if key.strip()])

    def seal(self, data: bytes) -> str:
        return self._fernet.encrypt(data).decode("ascii")

    def open(self, token: str) -> bytes:
        try:
            return self._fernet.decrypt(token.encode("ascii"))
        except InvalidToken:
            raise RunKeyError(f"a run event cannot be opened with the keys in {KEY_ENV}: it was "
                              "sealed with another key, or altered") from None
