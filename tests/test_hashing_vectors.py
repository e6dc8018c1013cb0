"""The request hashes, derived keys and tool operation ids of clients/typescript's shared vectors:
the Python client computes each exactly (the npm tests check the TypeScript client on the same
file), so a worker in either language records the same intent for the same request."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from reconciler.core.errors import HashInputError
from reconciler.core.hashing import canonical_json, derive_idempotency_key, request_hash
from reconciler.integrations.tool_calls import tool_operation

VECTORS: dict[str, Any] = json.loads(
    (Path(__file__).parent.parent / "clients/typescript/test/vectors/hashing.json")
    .read_text(encoding="utf-8"))


@pytest.mark.parametrize("case", VECTORS["request_hash"], ids=lambda c: c["name"])
def test_request_hash_is_the_vectors(case: dict[str, Any]) -> None:
    assert canonical_json(case["params"]).decode("utf-8") == case["canonical"]
    assert request_hash(case["params"]) == case["request_hash"]


@pytest.mark.parametrize("case", VECTORS["refused"], ids=lambda c: c["name"])
def test_parameters_that_are_not_plain_json_are_refused(case: dict[str, Any]) -> None:
    with pytest.raises(HashInputError):
        request_hash(case["params"])


@pytest.mark.parametrize("case", VECTORS["idempotency_key"],
                         ids=lambda c: f"{c['run_id']}|{c['tool_call_id']}")
def test_derived_idempotency_key_is_the_vectors(case: dict[str, Any]) -> None:
    assert derive_idempotency_key(case["run_id"], case["tool_call_id"]) == case["key"]


def test_the_vectors_show_the_pair_is_unambiguous() -> None:
    keys = {case["key"] for case in VECTORS["idempotency_key"]}
    assert len(keys) == len(VECTORS["idempotency_key"])  # ("ab", "c") and ("a", "bc") differ


@pytest.mark.parametrize("case", VECTORS["tool_operation"],
                         ids=lambda c: f"{c['scope']}|{c['tool'][:8]}")
def test_tool_operation_is_the_vectors(case: dict[str, Any]) -> None:
    assert tool_operation(case["scope"], case["tool"], case["arguments"]) == case["operation_id"]
