"""`HotRoute`: FastAPI routes answered without FastAPI's per-request dependency solver, for the
hot path (recording an intent or an attempt, the retry check, reading an operation).

FastAPI answers every request by walking the route's dependency graph afresh
(fastapi/dependencies/utils.py, solve_dependencies: a cache key and a scope check per
dependency, a pass per kind of parameter), parsing the body with `json.loads` and only then
validating the Python value against the model (fastapi/routing.py, get_request_handler). Over
uvicorn (the `http` benchmark, same machine, one run each way) that took `POST /v1/operations`
from 1,264 to 966 us of server CPU per request, attempts from 1,576 to 1,321, the retry check
from 1,374 to 1,153 (bench/README.md, http). A
route made only of what the hot routes are made of (path parameters, one JSON body model,
dependencies that take nothing but the request, the `Response` to set a status on, a
coroutine endpoint with a response model) needs none of that per request: `HotRoute` sorts
its parameters once, when the route is built, and per request parses and validates the body
in one pass (pydantic's `model_validate_json`), validates the path parameters with FastAPI's
own fields, calls the dependencies in their declared order, and serializes the answer with
FastAPI's own `serialize_response`, as FastAPI's handler does (an instance of the response
model itself, with that model's own serializer: what `serialize_response` comes to for one,
without its validation pass and type adapter, 2 us of CPU a request).

What is declared is unchanged: the OpenAPI document, the parameters' validation and the
dependencies come from the same signature, read by FastAPI. Whatever this handler does not
take on goes FastAPI's own way, request by request:

- a route of any other shape (query or header parameters, a sync endpoint, a form, a union
  body, dependencies with their own parameters or a `yield`, streams) is FastAPI's alone;
- a request whose body or path parameters fail validation, whose body is empty or not JSON,
  or whose client went away mid-body, is handed to FastAPI's handler (the body is cached on
  the request, so it reads the same bytes), so every 422 is FastAPI's own, errors, order and
  all;
- with dependency overrides set on the app (tests), every request is FastAPI's.

Every request to a `HotRoute` passes the app's `HotQueue` first, when it has one
(`app.state.hot_queue`): past that bound it is answered 503 with Retry-After at once
(service.admission).

FastAPI extension point: a custom `APIRoute` class, `route_class` of an `APIRouter`
(fastapi.tiangolo.com/how-to/custom-request-and-route/).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any

import fastapi.routing
from fastapi import Request, Response
from fastapi.datastructures import DefaultPlaceholder
from fastapi.dependencies.models import Dependant
from fastapi.params import Form
from fastapi.routing import APIRoute, serialize_response
from fastapi.utils import is_body_allowed_for_status_code
from pydantic import BaseModel, ValidationError
from starlette.exceptions import HTTPException

from reconciler.service.admission import HotQueue

Handler = Callable[[Request], Coroutine[Any, Any, Response]]


@dataclass(frozen=True, slots=True)
class _Plan:
    """What a request to one route needs, sorted out when the route is built."""

    call: Callable[..., Coroutine[Any, Any, Any]]
    path: tuple[Any, ...]  # FastAPI's ModelFields of the path parameters
    #: (parameter name, model) of the JSON body, if the route takes one.
    body: tuple[str, type[BaseModel]] | None
    #: (parameter name, dependency): each called with the request, in the declared order.
    dependencies: tuple[tuple[str, Callable[[Request], Coroutine[Any, Any, Any]]], ...]
    response_name: str | None
    request_name: str | None


class HotRoute(APIRoute):
    """An `APIRoute` that answers the requests it can with one planned pass (module doc)."""

    def get_route_handler(self) -> Handler:
        standard = super().get_route_handler()
        # FastAPI builds the handler of a route included in an app with the inclusion's view
        # of it (its prefix, the dependencies the inclusion adds) in this context variable,
        # as its own get_route_handler reads it (fastapi/routing.py). Older FastAPIs have none.
        context_var = getattr(fastapi.routing, "_effective_route_context_var", None)
        context = context_var.get() if context_var is not None else None
        route: Any = context if getattr(context, "original_route", None) is self else self
        plan = _plan(route)
        if plan is None:
            return _bounded(standard)
        overrides = getattr(route.dependency_overrides_provider, "dependency_overrides", None)
        status_code = route.status_code
        response_field = route.response_field
        by_alias = route.response_model_by_alias
        answer_model = _answer_model(route)

        async def answer(request: Request) -> Response:
            if overrides:
                return await standard(request)
            values: dict[str, Any] = {}
            if plan.body is not None:
                body_name, body_model = plan.body
                try:
                    raw = await request.body()
                except HTTPException:  # the body's limits (413, 408): FastAPI re-raises them
                    raise
                except Exception:  # the client went away mid-body: FastAPI answers 400
                    return await standard(request)
                try:
                    values[body_name] = body_model.model_validate_json(raw)
                except ValidationError:
                    return await standard(request)
            for field in plan.path:
                value, errors = field.validate(request.path_params.get(field.alias), values,
                                               loc=("path", field.alias))
                if errors:
                    return await standard(request)
                values[field.name] = value
            for name, dependency in plan.dependencies:
                values[name] = await dependency(request)
            if plan.request_name is not None:
                values[plan.request_name] = request
            answer_to = None
            if plan.response_name is not None:
                # As FastAPI makes the Response a route may set a status or headers on.
                answer_to = Response()
                del answer_to.headers["content-length"]
                answer_to.status_code = None  # type: ignore[assignment]
                values[plan.response_name] = answer_to
            raw_answer = await plan.call(**values)
            if isinstance(raw_answer, Response):
                return raw_answer
            if type(raw_answer) is answer_model:
                # What FastAPI's serialize_response comes to for an instance of the response
                # model itself: validating it hands the instance back as it is (pydantic does
                # not revalidate instances), then its own serializer writes the JSON.
                content = answer_model.__pydantic_serializer__.to_json(raw_answer,
                                                                       by_alias=by_alias)
            else:
                content = await serialize_response(field=response_field,
                                                   response_content=raw_answer,
                                                   by_alias=by_alias, dump_json=True)
            status = (answer_to.status_code if answer_to is not None and answer_to.status_code
                      else status_code)
            response = Response(content=content, status_code=status or 200,
                                media_type="application/json")
            if not is_body_allowed_for_status_code(response.status_code):
                response.body = b""
            if answer_to is not None:
                response.headers.raw.extend(answer_to.headers.raw)
            return response

        return _bounded(answer)


def _bounded(answer: Handler) -> Handler:
    """`answer`, within the app's `HotQueue` (`app.state.hot_queue`, when it has one): past
    its bound the request is refused before anything of it is read (service.admission)."""

    async def handler(request: Request) -> Response:
        queue: HotQueue | None = getattr(request.app.state, "hot_queue", None)
        if queue is None:
            return await answer(request)
        ticket = queue.admit(request.scope["path"])
        if isinstance(ticket, Response):
            return ticket
        try:
            return await answer(request)
        finally:
            queue.leave(ticket)

    return handler


def _answer_model(route: Any) -> type[BaseModel] | None:
    """The route's response model when an instance of it may be serialized without FastAPI
    validating it first (a model that revalidates its instances may not)."""
    model = route.response_model
    if (inspect.isclass(model) and issubclass(model, BaseModel)
            and model.model_config.get("revalidate_instances", "never") == "never"):
        return model
    return None


def _plan(route: Any) -> _Plan | None:
    """The plan for `route`, or None when it has anything this handler does not take on."""
    dependant: Dependant | None = route.dependant
    if (dependant is None or not inspect.iscoroutinefunction(dependant.call)
            or dependant.query_params or dependant.header_params or dependant.cookie_params
            or dependant.background_tasks_param_name or dependant.security_scopes_param_name
            or dependant.websocket_param_name or dependant.http_connection_param_name
            or len(dependant.body_params) > 1 or route.response_field is None
            or not isinstance(route.response_class, DefaultPlaceholder)
            or getattr(route, "is_sse_stream", False) or getattr(route, "is_json_stream", False)
            or route.response_model_include or route.response_model_exclude
            or route.response_model_exclude_unset or route.response_model_exclude_defaults
            or route.response_model_exclude_none):
        return None
    body = None
    if dependant.body_params:
        field = dependant.body_params[0]
        model = field.field_info.annotation
        if (getattr(route, "_embed_body_fields", False) or isinstance(field.field_info, Form)
                or not (inspect.isclass(model) and issubclass(model, BaseModel))):
            return None
        body = (field.name, model)
    dependencies = []
    for sub in dependant.dependencies:
        if (not inspect.iscoroutinefunction(sub.call) or sub.name is None
                or sub.request_param_name is None or sub.dependencies or sub.path_params
                or sub.query_params or sub.header_params or sub.cookie_params
                or sub.body_params or sub.response_param_name
                or sub.background_tasks_param_name or sub.security_scopes_param_name
                or sub.own_oauth_scopes or sub.websocket_param_name
                or sub.http_connection_param_name):
            return None
        dependencies.append((sub.name, sub.call))
    return _Plan(dependant.call, tuple(dependant.path_params), body, tuple(dependencies),
                 dependant.response_param_name, dependant.request_param_name)
