"""Each fake provider's own error answers, chosen by the root a request came in under.

An SDK reads an error by its provider's shape (Stripe's `{"error": {"type", "message"}}`,
Slack's `ok: false`, GitHub's `{"message", "documentation_url"}`, Postmark's `ErrorCode`,
Twilio's `{"code", "message", "more_info", "status"}`); FastAPI's `{"detail"}` would reach it as
an unreadable answer. So the sandbox's unknown routes, rejected parameters and rate limits
answer in the shape of the provider whose root was asked.
"""

from __future__ import annotations

import math
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException

JSONObject = dict[str, Any]

#: Paths served at the host's root, by the provider root they belong to (Postmark's: its SDK
#: joins absolute paths to the host).
_ROOT_OF = {"email": "mail", "messages": "mail"}

GITHUB_DOCS = "https://docs.github.com/rest"


class ProviderError(Exception):
    """An answer in a provider's own error shape, raised where returning one is not possible
    (dependencies, helpers)."""

    def __init__(self, status_code: int, body: JSONObject,
                 headers: dict[str, str] | None = None) -> None:
        super().__init__(status_code, body)
        self.status_code = status_code
        self.body = body
        self.headers = headers or {}

    def response(self) -> JSONResponse:
        return JSONResponse(self.body, self.status_code, headers=self.headers)


def provider_root(path: str) -> str:
    """`/pay/v1/charges` -> `pay`; `/email` -> `mail`."""
    root = path.strip("/").split("/")[0]
    return _ROOT_OF.get(root, root)


def stripe_error(status: int, message: str, type_: str = "invalid_request_error",
                 **fields: Any) -> ProviderError:
    # https://docs.stripe.com/api/errors: every error is {"error": {"type", "message", ...}}.
    return ProviderError(status, {"error": {"type": type_, "message": message, **fields}})


def slack_error(code: str, status: int = 200) -> ProviderError:
    # https://docs.slack.dev/apis/web-api/#evaluating-responses: HTTP 200, `ok: false`.
    return ProviderError(status, {"ok": False, "error": code})


def github_error(status: int, message: str, docs: str = GITHUB_DOCS,
                 **fields: Any) -> ProviderError:
    # GitHub's REST errors carry the status again, as a string, since 2023 (githubkit and
    # PyGithub read `message` only).
    return ProviderError(status, {"message": message, **fields, "documentation_url": docs,
                                  "status": str(status)})


def postmark_error(status: int, code: int, message: str) -> ProviderError:
    # https://postmarkapp.com/developer/api/overview#error-codes
    return ProviderError(status, {"ErrorCode": code, "Message": message})


def twilio_error(status: int, code: int, message: str) -> ProviderError:
    # https://www.twilio.com/docs/usage/twilios-response#response-formats-exceptions
    return ProviderError(status, {"code": code, "message": message, "status": status,
                                  "more_info": f"https://www.twilio.com/docs/errors/{code}"})


def _unknown_route(root: str, method: str, path: str) -> ProviderError | None:
    if root == "pay":
        return stripe_error(404, f"Unrecognized request URL ({method}: "
                                 f"{path.removeprefix('/pay')}). Please see "
                                 "https://stripe.com/docs or we can help at "
                                 "https://support.stripe.com/.")
    if root == "chat":
        # Slack answers a method it does not have with 404 and `unknown_method`.
        return slack_error("unknown_method", 404)
    if root == "gh":
        return github_error(404, "Not Found")
    if root == "mail":
        # Postmark documents the 404 (https://postmarkapp.com/support/article/troubleshooting-
        # 422-unprocessable-entity-errors) but no ErrorCode for it: 0.
        return postmark_error(404, 0, f"The resource {path} was not found.")
    if root == "twilio":
        return twilio_error(404, 20404, f"The requested resource {path.removeprefix('/twilio')} "
                                        "was not found")
    return None


def _bad_parameter(root: str, name: str, problem: str) -> ProviderError | None:
    if root == "pay":
        return stripe_error(400, f"Invalid {name}: {problem}", param=name,
                            code="parameter_invalid")
    if root == "chat":
        return slack_error("invalid_arguments")
    if root == "gh":
        return github_error(422, "Validation Failed", errors=[
            {"resource": "Search" if name == "q" else "Parameter", "field": name,
             "code": "invalid", "message": problem}])
    if root == "mail":
        # Postmark answers bad input with 422 and an ErrorCode; none is documented for a query
        # parameter: 0.
        return postmark_error(422, 0, f"Invalid '{name}': {problem}")
    if root == "twilio":
        return twilio_error(400, 20001, f"Invalid parameter {name}: {problem}")
    return None


def rate_limited(root: str, wait_s: float, now: float, *, primary: bool = False) -> ProviderError:
    """Each provider's own answer to a spent rate limit, asking for `wait_s`. GitHub has two
    (https://docs.github.com/rest/using-the-rest-api/rate-limits-for-the-rest-api#exceeding-the-
    rate-limit): a spent primary limit is a 403 with `x-ratelimit-remaining: 0` and the reset as
    a Unix time, a secondary one a 429 with `Retry-After`."""
    seconds = str(max(1, math.ceil(wait_s)))
    if root == "gh" and primary:
        limit = github_error(403, "API rate limit exceeded",
                             GITHUB_DOCS + "/using-the-rest-api/rate-limits-for-the-rest-api")
        limit.headers.update({"x-ratelimit-limit": "5000", "x-ratelimit-remaining": "0",
                              "x-ratelimit-reset": str(math.ceil(now + wait_s))})
        return limit
    error = {
        "gh": github_error(429, "You have exceeded a secondary rate limit. Please wait a few "
                                "minutes before you try again.", GITHUB_DOCS +
                           "/using-the-rest-api/rate-limits-for-the-rest-api"),
        # https://docs.slack.dev/apis/web-api/rate-limits: 429, Retry-After, `ratelimited`.
        "chat": slack_error("ratelimited", 429),
        # https://docs.stripe.com/rate-limits: 429 with code `rate_limit`.
        "pay": stripe_error(429, "Request rate limit exceeded.", code="rate_limit"),
        "twilio": twilio_error(429, 20429, "Too Many Requests"),
    }.get(root) or postmark_error(429, 429, "Rate Limit Exceeded")
    error.headers["Retry-After"] = seconds
    return error


def _problem(status: int, title: str, detail: str) -> JSONResponse:
    """The sandbox's own error (its /_sandbox endpoints, unknown roots): RFC 9457."""
    return JSONResponse({"type": "about:blank", "title": title, "status": status,
                         "detail": detail}, status, media_type="application/problem+json")


def _first_problem(exc: RequestValidationError) -> tuple[str, str]:
    for error in exc.errors():
        where = [str(part) for part in error.get("loc", ()) if part not in ("query", "body",
                                                                          "header", "path")]
        return ".".join(where) or "body", str(error.get("msg", "invalid"))
    return "body", "invalid"


def install(app: FastAPI) -> None:
    """Answer provider errors, unknown routes and rejected parameters in each provider's
    shape (the sandbox's own endpoints in RFC 9457 problem details)."""

    @app.exception_handler(ProviderError)
    async def provider_error(request: Request, exc: ProviderError) -> JSONResponse:
        return exc.response()

    @app.exception_handler(HTTPException)
    async def http_error(request: Request, exc: HTTPException) -> JSONResponse:
        answer = _unknown_route(provider_root(request.url.path), request.method,
                                request.url.path) if exc.status_code in (404, 405) else None
        if answer is None:
            return _problem(exc.status_code, "Not Found" if exc.status_code == 404 else
                            "Request failed", str(exc.detail))
        return answer.response()

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        name, problem = _first_problem(exc)
        answer = _bad_parameter(provider_root(request.url.path), name, problem)
        if answer is None:
            return _problem(422, "Invalid request", f"{name}: {problem}")
        return answer.response()
