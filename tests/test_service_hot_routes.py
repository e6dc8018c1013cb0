"""`HotRoute` (service/hot_routes.py) answers every request as FastAPI's own `APIRoute` would:
the same status and the same bytes, for bodies and ids valid or not, JSON or not; the hot
routes take its planned path; dependency overrides still apply."""

import asyncio
import json
from collections.abc import Callable, Coroutine, MutableMapping
from typing import Annotated, Any

import fastapi.routing
import pytest
from fastapi import APIRouter, Depends, FastAPI, HTTPException, Path, Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from fastapi.routing import APIRoute
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

from reconciler.core.schemas import IDENT_PATTERN, AttemptIn, IntentIn, RetryIn
from reconciler.service import operations
from reconciler.service.hot_routes import HotRoute, _plan

from fault_harness import HASH


class Echo(BaseModel):
    operation_id: str
    body: dict[str, Any]
    caller: str


async def caller_of(request: Request) -> str:
    # As the auth dependencies refuse: an exception raised from the dependency.
    if request.headers.get("x-refuse"):
        raise HTTPException(403, "refused")
    return request.headers.get("x-caller", "anonymous")


Id = Annotated[str, Path(min_length=1, max_length=200, pattern=IDENT_PATTERN)]


def _echoing(model: type[BaseModel]) -> Callable[..., Coroutine[Any, Any, Echo]]:
    # Annotations evaluated here (no `from __future__ import annotations` in this file), so
    # that FastAPI reads `model` as each route's body.
    async def route(operation_id: Id, body: model, response: Response,  # type: ignore[valid-type]
                    caller: Annotated[str, Depends(caller_of)]) -> Echo:
        if operation_id.startswith("repeat"):
            response.status_code = 200
            response.headers["x-repeat"] = "yes"
        given: BaseModel = body
        return Echo(operation_id=operation_id, body=given.model_dump(mode="json"), caller=caller)

    return route


def echo_app(route_class: type[APIRoute]) -> FastAPI:
    """The hot routes' shapes (a path id, a JSON body model, request-only dependencies, the
    Response to set a status on), echoing what they were given."""
    router = APIRouter(prefix="/v1/operations", route_class=route_class)
    for name, model in (("intents", IntentIn), ("attempts", AttemptIn), ("retry", RetryIn)):
        router.add_api_route(f"/{{operation_id:path}}/{name}", _echoing(model), methods=["POST"],
                             status_code=201, response_model=Echo)
    app = FastAPI()
    app.include_router(router)

    async def every_detail(request: Request, exc: RequestValidationError) -> JSONResponse:
        # repr: every error in full (type, loc, msg, input, ctx), even inputs JSON cannot say.
        return JSONResponse({"errors": repr(exc.errors())}, status_code=422)

    app.add_exception_handler(RequestValidationError, every_detail)  # type: ignore[arg-type]
    return app


STANDARD, HOT = TestClient(echo_app(APIRoute)), TestClient(echo_app(HotRoute))

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(), inner, max_size=3),
    max_leaves=8)
times = st.sampled_from(["2026-01-01T00:00:00Z", "2026-01-01T00:00:00", "2026-13-01T00:00:00Z",
                         "2026-01-01 00:00:00+01:00", "1767225600"]) | st.integers()
field_values: st.SearchStrategy[Any] = st.sampled_from([
    HASH, "sha256:" + "0" * 63, "k-1", "", "a" * 201, "\x00", 1, 1.0, True, None, "response",
    "timeout", "idempotent_write", "dispatching", "200", 200, 99, [], {}]) | times | json_values
fields = st.sampled_from(["operation_id", "request_hash", "idempotency_key", "provider",
                          "action", "effect", "correlation", "attempt", "at", "outcome",
                          "status", "receipt", "holder", "run_id", "extra"])
valid_bodies: dict[str, dict[str, Any]] = {
    "intents": {"operation_id": "op-1", "request_hash": HASH, "provider": "pay",
                "action": "charge", "effect": "idempotent_write"},
    "attempts": {"attempt": 1, "request_hash": HASH, "outcome": "response", "status": 200,
                 "receipt": {"provider_ref": "ch_1", "request_hash": HASH}},
    "retry": {"request_hash": HASH, "holder": "w-1"},
}


@st.composite
def bodies(draw: st.DrawFn, route: str) -> bytes:
    """Valid bodies, each changed in a few fields; any JSON; bytes that are not JSON."""
    kind = draw(st.sampled_from(["changed", "json", "bytes"]))
    if kind == "bytes":
        return draw(st.binary(max_size=40))
    if kind == "json":
        return json.dumps(draw(json_values)).encode()
    body = dict(valid_bodies[route])
    for name in draw(st.lists(fields, max_size=3)):
        if draw(st.booleans()):
            body.pop(name, None)
        else:
            body[name] = draw(field_values)
    return json.dumps(body).encode()


ids = st.sampled_from(["op-1", "repeat-1", "a/b", "", "bad id", "x" * 201, "op%2F1"])


def answers(client: TestClient, path: str, body: bytes, headers: dict[str, str]
            ) -> tuple[int, bytes, list[tuple[str, str]]]:
    response = client.post(path, content=body, headers=headers)
    return response.status_code, response.content, sorted(response.headers.items())


@settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
@given(route=st.sampled_from(sorted(valid_bodies)), data=st.data(), operation_id=ids,
       headers=st.sampled_from([{}, {"x-caller": "w"}, {"x-refuse": "1"}]))
@example(route="intents", data=None, operation_id="op-1", headers={})
def test_hot_route_answers_as_fastapi_does(route: str, data: Any, operation_id: str,
                                           headers: dict[str, str]) -> None:
    body = (json.dumps(valid_bodies[route]).encode() if data is None
            else data.draw(bodies(route)))
    headers = {"content-type": "application/json", **headers}
    path = f"/v1/operations/{operation_id}/{route}"
    assert answers(HOT, path, body, headers) == answers(STANDARD, path, body, headers)


@pytest.mark.parametrize("body", [
    b"", b"null", b"[]", b'{"request_hash": "x", "request_hash": "' + HASH.encode() + b'"}',
    b'{"request_hash": "' + HASH.encode() + b'", "holder": NaN}', b'{"request_hash": "\\ud800"}',
    b"\xff\xfe", b'{"request_hash": "' + HASH.encode() + b'"} trailing'])
def test_hot_route_answers_edge_bodies_as_fastapi_does(body: bytes) -> None:
    headers = {"content-type": "application/json"}
    path = "/v1/operations/op-1/retry"
    assert answers(HOT, path, body, headers) == answers(STANDARD, path, body, headers)


async def _answer_to_a_client_gone_mid_body(app: FastAPI) -> list[object]:
    messages: list[dict[str, Any]] = [
        {"type": "http.request", "body": b'{"request_hash": "sha', "more_body": True}]

    async def receive() -> dict[str, Any]:
        return messages.pop(0) if messages else {"type": "http.disconnect"}

    sent: list[object] = []

    async def send(message: MutableMapping[str, Any]) -> None:
        sent.append(message.get("status", message["type"]))

    path = "/v1/operations/op-1/retry"
    await app({"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1",
               "method": "POST", "scheme": "http", "path": path, "raw_path": path.encode(),
               "query_string": b"", "root_path": "", "client": ("127.0.0.1", 1),
               "server": ("127.0.0.1", 80),
               "headers": [(b"host", b"127.0.0.1"), (b"content-type", b"application/json")]},
              receive, send)
    return sent


def test_a_client_gone_mid_body_is_answered_as_fastapi_does() -> None:
    answers = [asyncio.run(_answer_to_a_client_gone_mid_body(echo_app(cls)))
               for cls in (APIRoute, HotRoute)]
    assert answers == [[400, "http.response.body"]] * 2


def test_a_valid_request_takes_the_planned_path(monkeypatch: pytest.MonkeyPatch) -> None:
    def unreachable(**_: Any) -> None:
        raise AssertionError("FastAPI's own handler solved the dependencies")

    # FastAPI's handler looks its solver up in its module on each request.
    monkeypatch.setattr(fastapi.routing, "solve_dependencies", unreachable)
    body = json.dumps(valid_bodies["retry"])
    answer = HOT.post("/v1/operations/repeat-1/retry", content=body,
                      headers={"content-type": "application/json", "x-caller": "w"})
    assert answer.status_code == 200 and answer.headers["x-repeat"] == "yes"
    assert answer.json() == {"operation_id": "repeat-1", "caller": "w",
                             "body": RetryIn.model_validate_json(body).model_dump(mode="json")}
    with pytest.raises(AssertionError, match="solved the dependencies"):
        HOT.post("/v1/operations/repeat-1/retry", content=b"{}",
                 headers={"content-type": "application/json"})


def test_the_service_hot_routes_are_planned() -> None:
    planned = {(r.path, *sorted(r.methods or ())) for r in operations.router.routes
               if isinstance(r, APIRoute) and _plan(r) is not None}
    assert planned == {("/v1/operations", "POST"),
                       ("/v1/operations/{operation_id:readable_id}", "GET"),
                       ("/v1/operations/{operation_id:path}/attempts", "POST"),
                       ("/v1/operations/{operation_id:path}/retry", "POST")}


def test_routes_of_other_shapes_are_fastapis() -> None:
    router = APIRouter(route_class=HotRoute)

    @router.get("/sync", response_model=Echo)
    def sync() -> Echo:
        return Echo(operation_id="x", body={}, caller="c")

    @router.get("/query", response_model=Echo)
    async def query(q: str) -> Echo:
        return Echo(operation_id=q, body={}, caller="c")

    assert [_plan(r) for r in router.routes] == [None, None]


def test_dependency_overrides_still_apply() -> None:
    app = echo_app(HotRoute)

    async def refuse(request: Request) -> str:
        raise HTTPException(403, "overridden")

    app.dependency_overrides[caller_of] = refuse
    answer = TestClient(app).post("/v1/operations/op-1/retry",
                                  content=json.dumps(valid_bodies["retry"]),
                                  headers={"content-type": "application/json"})
    assert answer.status_code == 403 and answer.json() == {"detail": "overridden"}
