"""Request fingerprints and derived idempotency keys (SPEC section 2, canonical hashing).

request_hash = "sha256:" + hex(sha256(JCS(params)))  -- RFC 8785 canonical JSON via `rfc8785`.
"""

from __future__ import annotations

import hashlib
from typing import Any

import rfc8785

from reconciler.core.errors import HashInputError

HASH_PREFIX = "sha256:"


def canonical_json(value: Any) -> bytes:
    """RFC 8785 bytes of `value`; anything that is not plain JSON is an error, never `str()`-ed."""
    try:
        return rfc8785.dumps(value)
    except rfc8785.CanonicalizationError as exc:
        raise HashInputError(
            f"cannot hash parameters: {exc}; pass only dict (str keys), list, str, "
            "int (|n| < 2**53), finite float, bool or None"
        ) from exc


def request_hash(params: Any) -> str:
    """The fingerprint of an operation's canonical parameters: ``sha256:<64 hex>``."""
    return HASH_PREFIX + hashlib.sha256(canonical_json(params)).hexdigest()


def derive_idempotency_key(run_id: str, tool_call_id: str) -> str:
    """An idempotency key for one tool call of one run, unambiguous by construction.

    The pair is hashed as a canonical JSON array, so ("ab", "c") and ("a", "bc") differ: the
    encoding carries each string's boundaries, which plain concatenation loses.
    """
    for name, value in (("run_id", run_id), ("tool_call_id", tool_call_id)):
        if not isinstance(value, str) or not value:
            raise HashInputError(f"{name} must be a non-empty string, got {value!r}")
    return "rk_" + hashlib.sha256(canonical_json([run_id, tool_call_id])).hexdigest()
