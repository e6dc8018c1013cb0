"""SPEC section 2: canonical hashing and the derived idempotency key."""

import hashlib

import pytest

from reconciler.core.errors import HashInputError
from reconciler.core.hashing import derive_idempotency_key, request_hash


def test_request_hash_is_sha256_of_rfc8785_canonical_json() -> None:
    expected = hashlib.sha256(b'{"a":[1,"\xc3\xa9"],"b":2.5}').hexdigest()
    assert request_hash({"b": 2.5, "a": [1, "é"]}) == "sha256:" + expected


def test_request_hash_ignores_key_order_and_whitespace() -> None:
    assert request_hash({"x": 1, "y": {"b": 1, "a": 2}}) == request_hash(
        {"y": {"a": 2, "b": 1}, "x": 1})


def test_request_hash_changes_with_any_value() -> None:
    assert request_hash({"amount": 100}) != request_hash({"amount": 101})


@pytest.mark.parametrize("bad", [object(), b"bytes", {1: "int key"}, float("nan"), 2**60,
                                 {"when": __import__("datetime").date(2026, 1, 1)}])
def test_non_json_input_is_a_clear_error_not_str(bad: object) -> None:
    with pytest.raises(HashInputError, match="cannot hash parameters"):
        request_hash(bad)


def test_derived_key_is_unambiguous_where_concatenation_collides() -> None:
    assert derive_idempotency_key("ab", "c") != derive_idempotency_key("a", "bc")


def test_derived_key_is_stable_across_calls() -> None:
    assert derive_idempotency_key("run-1", "call-7") == derive_idempotency_key("run-1", "call-7")
    assert derive_idempotency_key("run-1", "call-7").startswith("rk_")


@pytest.mark.parametrize("run_id, tool_call_id", [("", "x"), ("x", ""), (None, "x")])
def test_derived_key_refuses_empty_parts(run_id: object, tool_call_id: object) -> None:
    with pytest.raises(HashInputError):
        derive_idempotency_key(run_id, tool_call_id)  # type: ignore[arg-type]
