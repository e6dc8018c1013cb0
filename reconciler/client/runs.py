"""A client for the sidecar's runs API, with seed 003's auto-continue loop.

    run_task("...")  ─ POST /v1/runs {input, long_task} ─ paused: task_continue_request c1
                     ─ POST /v1/runs {messages: [..., c1, task_continue_response c1]} ─ …
                     ─ completed / stopped / waiting for a human: the run

Streamed or not: streamed, every run event goes to `on_event` as it arrives, and the pause is
the `response.output_item.done` event; not streamed, it is the run's `continue_request`.

A request the sidecar refused as overloaded (503 `overloaded`, before reading any of it: no run
was created) is sent again as its Retry-After asks, within `overload_deadline_s`, as
ReconcilerClient does.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import httpx

from reconciler.client.calls import OVERLOAD_DEADLINE_S
from reconciler.client.http import _settings, send_patiently
from reconciler.core.errors import ReconcilerError

#: Called with each server-sent event: {"event", "id", "data"}.
OnEvent = Callable[[dict[str, Any]], None]
CONTINUE_EVENT = "response.output_item.done"
#: A runs request answers within its deadline_s (at most 300 s) plus the step under way.
RUNS_TIMEOUT = httpx.Timeout(330.0, connect=5.0)


class RunsApiError(ReconcilerError):
    """The sidecar refused a runs request; `problem` is its RFC 9457 body."""

    def __init__(self, status: int, problem: Mapping[str, Any]) -> None:
        super().__init__(f"{status} {problem.get('title', '')}: {problem.get('detail', '')}")
        self.status = status
        self.problem = dict(problem)


def sse_events(lines: Iterator[str]) -> Iterator[dict[str, Any]]:
    """Server-sent events from a body's lines: {event, id, data (parsed JSON)}; comments and
    blank keep-alives skipped."""
    fields: dict[str, str] = {}
    for line in lines:
        if not line:
            if "data" in fields:
                yield {"event": fields.get("event", "message"), "id": fields.get("id"),
                       "data": json.loads(fields["data"])}
            fields = {}
        elif not line.startswith(":"):
            name, _, value = line.partition(":")
            fields[name] = value.removeprefix(" ")


class RunsClient:
    """The runs API. Token and URL default as for ReconcilerClient ($RECONCILER_TOKEN,
    $RECONCILER_URL)."""

    def __init__(self, base_url: str | None = None, *, token: str | None = None,
                 timeout: httpx.Timeout | float = RUNS_TIMEOUT,
                 transport: httpx.BaseTransport | None = None,
                 overload_deadline_s: float = OVERLOAD_DEADLINE_S) -> None:
        self.http = httpx.Client(timeout=timeout, transport=transport,
                                 **_settings(base_url, token))
        self.overload_deadline_s = overload_deadline_s

    def close(self) -> None:
        self.http.close()

    def __enter__(self) -> RunsClient:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def get(self, run_id: str) -> dict[str, Any]:
        return self._json(self._send(self.http.build_request(
            "GET", f"/v1/runs/{run_id}", params={"limit": 1000})))

    def run_task(self, input: str, *, config: Mapping[str, Any] | None = None,
                 deadline_s: float | None = None, stream: bool = False,
                 on_event: OnEvent | None = None, max_requests: int = 1000) -> dict[str, Any]:
        """Run `input` as a long task to its end: every pause for a request deadline is
        continued at once. Returns the run (completed, stopped, or waiting for a human).
        Raises RunsApiError on a refusal, and after `max_requests` requests."""
        body: dict[str, Any] = {"input": input, "long_task": True}
        if config is not None:
            body["config"] = dict(config)
        if deadline_s is not None:
            body["deadline_s"] = deadline_s
        messages: list[dict[str, Any]] = [{"role": "user", "content": input}]
        for _ in range(max_requests):
            run_id, pause = (self._streamed(body, on_event) if stream else self._plain(body))
            if pause is None:
                return self.get(run_id)
            # Seed 003: the follow-up carries the previous messages, the original request
            # item and its matching response.
            messages += [pause, {"type": "task_continue_response",
                                 "continue_request_id": pause["id"]}]
            body = {"messages": list(messages), "long_task": True}
            if deadline_s is not None:
                body["deadline_s"] = deadline_s
        raise RunsApiError(0, {"title": "too many requests",
                               "detail": f"the task was still paused after {max_requests}"})

    def _plain(self, body: dict[str, Any]) -> tuple[str, dict[str, Any] | None]:
        run = self._json(self._send(self.http.build_request("POST", "/v1/runs", json=body)))
        request = run.get("continue_request")
        pause = None if request is None else {
            "type": "task_continue_request", "id": request["id"], "step": request["step"]}
        return str(run["run_id"]), pause

    def _streamed(self, body: dict[str, Any],
                  on_event: OnEvent | None) -> tuple[str, dict[str, Any] | None]:
        run_id, pause = "", None
        response = self._send(self.http.build_request(
            "POST", "/v1/runs", json={**body, "stream": True}), stream=True)
        try:
            if response.status_code >= 400:
                response.read()
                self._json(response)
            for event in sse_events(response.iter_lines()):
                if on_event is not None:
                    on_event(event)
                data = event["data"]
                if event["event"] == "problem":
                    raise RunsApiError(response.status_code, data)
                if event["event"] == CONTINUE_EVENT:
                    pause = dict(data["item"])
                elif isinstance(data, dict) and "run_id" in data:
                    run_id = str(data["run_id"])
        finally:
            response.close()
        return run_id, pause

    def _send(self, request: httpx.Request, *, stream: bool = False) -> httpx.Response:
        return send_patiently(self.http, request, self.overload_deadline_s, stream=stream)

    @staticmethod
    def _json(response: httpx.Response) -> dict[str, Any]:
        body: dict[str, Any] = response.json()
        if response.status_code >= 400:
            raise RunsApiError(response.status_code, body)
        return body
