"""`reconciler ops`: the operator console's actions from a terminal, against a running sidecar.

    reconciler ops queue                      what waits on a human, longest first
    reconciler ops show OP                    an operation: verdict, attempts, evidence
    reconciler ops resolve OP --verdict verified_applied --note "seen in the dashboard"
    reconciler ops approve RUN --note ...     a call waiting for its first send: send it
    reconciler ops approve RUN --decision not_applied|applied|approve_retry --note ...
                                              a call sent already whose effect is unknown
    reconciler ops approve --operation OP --note ...   approve an operation's retry
    reconciler ops reject RUN --note ...
    reconciler ops compensate OP --reference re_1 --note ...   a duplicate's extra effect undone
    reconciler ops runs [--state awaiting_approval] [--unhealthy] [--correlation-id ID]

The sidecar is RECONCILER_URL (default http://127.0.0.1:8765), the credential
RECONCILER_TOKEN (an operator's; never a flag: it would show in `ps` and shell history). The
actor a decision records is RECONCILER_OPERATOR, else the login name; a sidecar with operator
credentials records the credential's own name instead. Tables fit 100 columns (or the
terminal, if narrower); `--json` prints the sidecar's answers for scripts.
"""

from __future__ import annotations

import getpass
import json
import os
from datetime import UTC, datetime
from enum import StrEnum
from typing import Annotated, Any

import httpx
import typer

from reconciler.cli import terminal

URL_ENV, TOKEN_ENV, OPERATOR_ENV = "RECONCILER_URL", "RECONCILER_TOKEN", "RECONCILER_OPERATOR"
DEFAULT_URL = "http://127.0.0.1:8765"

ops = typer.Typer(help="Act on what waits on a human, against a running sidecar "
                  f"({URL_ENV}, {TOKEN_ENV}).", no_args_is_help=True, rich_markup_mode=None)

Json = Annotated[bool, typer.Option("--json", help="print the sidecar's JSON answer")]
Note = Annotated[str, typer.Option("--note", help="what you checked, kept with the decision")]


class ResolveVerdict(StrEnum):
    verified_applied = "verified_applied"
    verified_not_applied = "verified_not_applied"


class RunDecision(StrEnum):
    approve = "approve"
    not_applied = "not_applied"
    applied = "applied"
    approve_retry = "approve_retry"


#: The pending approval's `kind` for a call not sent yet (runtime.approvals.BEFORE_DISPATCH, as the
#: API's run answer carries it).
BEFORE_DISPATCH = "before_dispatch"
#: What each kind of pending approval takes (the API refuses any other).
FIRST_SEND = (RunDecision.approve,)
AFTER_SEND = (RunDecision.not_applied, RunDecision.applied, RunDecision.approve_retry)


def _client() -> httpx.Client:
    token = os.environ.get(TOKEN_ENV)
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    return httpx.Client(base_url=os.environ.get(URL_ENV, DEFAULT_URL), headers=headers,
                        timeout=60)


def _call(method: str, path: str, **kwargs: Any) -> Any:
    """The sidecar's JSON answer; a problem (or no sidecar) exits 1 saying why."""
    try:
        with _client() as http:
            response = http.request(method, path, **kwargs)
    except httpx.HTTPError as exc:
        typer.echo(f"cannot reach the sidecar at {os.environ.get(URL_ENV, DEFAULT_URL)}: "
                   f"{exc} (set {URL_ENV})", err=True)
        raise typer.Exit(1) from None
    if response.status_code >= 400:
        try:
            problem = response.json()
            detail = f"{problem.get('title')}: {problem.get('detail')}"
        except ValueError:
            detail = response.text[:300]
        typer.echo(f"{method} {path}: {response.status_code} {detail}", err=True)
        raise typer.Exit(1)
    return response.json()


def _actor() -> str:
    return os.environ.get(OPERATOR_ENV) or getpass.getuser()


def _table(title: str | None, columns: list[str], rows: list[list[str]]) -> None:
    typer.echo(terminal.table(columns, rows, title=title))


def _age(stamp: str, now: datetime) -> str:
    seconds = max(0, int((now - datetime.fromisoformat(stamp)).total_seconds()))
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


def _queue_items() -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    for query in ("escalated=true", "verdict=duplicate_effect", "verdict=false_success"):
        for op in _call("GET", f"/v1/operations?{query}&limit=500")["items"]:
            # A compensated duplicate keeps its verdict and waits on nobody (reason null).
            if op["reason"] is not None and op not in (i.get("item") for i in items):
                items.append({"kind": "operation", "id": op["operation_id"],
                              "reason": op["reason"], "since": op["updated_at"], "item": op})
    for query, reason in (("state=awaiting_approval", "awaiting_approval"),
                          ("unhealthy=true", "unhealthy")):
        for run in _call("GET", f"/v1/runs?{query}&limit=500")["items"]:
            first = reason == "awaiting_approval" and _first_send(_pending(run["run_id"]))
            items.append({"kind": "run", "id": run["run_id"],
                          "reason": "first_send" if first else reason,
                          "since": run["updated_at"], "item": run})
    return sorted(items, key=lambda i: str(i["since"]))


@ops.command("queue")
def queue(as_json: Json = False) -> None:
    """What waits on a human: operations a human must act on (escalated, escalate_to_human),
    duplicate effects and false successes, runs awaiting approval (first_send: waiting for
    approval before its first send) and unhealthy runs."""
    items = _queue_items()
    if as_json:
        typer.echo(json.dumps([{k: v for k, v in i.items() if k != "item"} for i in items],
                              indent=2))
        return
    now = datetime.now(UTC)
    _table(f"Needs a human: {len(items)}", ["waiting", "kind", "id", "reason"],
           [[_age(i["since"], now), i["kind"], i["id"], str(i["reason"])] for i in items])


@ops.command("show")
def show(operation_id: str, as_json: Json = False) -> None:
    """An operation: its intent, verdict, attempts and evidence."""
    op = _call("GET", f"/v1/operations/{operation_id}")
    if as_json:
        typer.echo(json.dumps(op, indent=2))
        return
    intent = op["intent"]
    console = terminal.console()
    console.print(f"{intent['operation_id']}  {intent['provider']}/{intent['action']} "
                  f"({intent['effect']})")
    console.print(f"verdict {op['verdict']}, next {op['next_action']}, retry "
                  f"{'allowed' if op['retry_allowed'] else 'not allowed'}"
                  + (", escalated" if op["escalated"] else ""))
    if op["findings"]:
        console.print("findings: " + ", ".join(op["findings"]))
    _table("Attempts", ["#", "at", "outcome", "status"],
           [[str(a["attempt"]), a["at"], a["outcome"], str(a["status"] or "")]
            for a in op["attempts"]])
    _table("Evidence", ["at", "kind", "authority", "source", "what"],
           [[e["at"], e["kind"], e.get("authority") or "", e.get("source") or
             e.get("actor") or "", _what(e)] for e in op["evidence"]])


def _what(e: dict[str, Any]) -> str:
    refs = ", ".join(m["provider_ref"] for m in e.get("matches") or [])
    parts = [e.get("verdict") or "", refs or e.get("provider_ref") or "",
             e.get("error") or "", e.get("note") or ""]
    if e["kind"] == "observation" and not refs and not e.get("error"):
        parts[1] = "zero matches"
    return " ".join(p for p in parts if p)


def _show_after(op: dict[str, Any], as_json: bool) -> None:
    if as_json:
        typer.echo(json.dumps(op, indent=2))
    else:
        typer.echo(f"{op['intent']['operation_id']}: verdict {op['verdict']}, next "
                   f"{op['next_action']}, retry "
                   f"{'allowed' if op['retry_allowed'] else 'not allowed'}")


@ops.command("resolve")
def resolve(operation_id: str, verdict: Annotated[ResolveVerdict, typer.Option(
        "--verdict", help="what you found at the provider")], note: Note,
            as_json: Json = False) -> None:
    """Resolve an operation: a human's verdict, kept as evidence until proof supersedes it."""
    _show_after(_call("POST", f"/v1/operations/{operation_id}/resolution", json={
        "verdict": verdict.value, "actor": _actor(), "note": note}), as_json)


def _pending(run_id: str) -> dict[str, Any]:
    run = _call("GET", f"/v1/runs/{run_id}?limit=1")
    if run.get("approval") is None:
        typer.echo(f"run {run_id} waits for no approval (it is {run['state']})", err=True)
        raise typer.Exit(1)
    approval: dict[str, Any] = run["approval"]
    return approval


def _first_send(pending: dict[str, Any]) -> bool:
    return bool((pending.get("payload") or {}).get("kind") == BEFORE_DISPATCH)


def _show_run(run: dict[str, Any], as_json: bool) -> None:
    if as_json:
        typer.echo(json.dumps(run, indent=2))
    else:
        typer.echo(f"run {run['run_id']}: {run['state']}"
                   + (f" ({run['stop_reason']})" if run.get("stop_reason") else ""))


@ops.command("approve")
def approve(run_id: Annotated[str | None, typer.Argument(help="the run waiting")] = None,
            decision: Annotated[RunDecision | None, typer.Option(
                help="approve: send a call waiting for its first send (the default for one); "
                "for a call sent already, say which: not_applied: it did not happen, send it "
                "again; applied: it happened; approve_retry: approve a re-send without "
                "saying")] = None,
            operation: Annotated[str | None, typer.Option(
                "--operation", help="approve this operation's retry instead (an action "
                "that cannot be compensated)")] = None,
            note: Note = "", as_json: Json = False) -> None:
    """Decide the call a run waits for (and let it go on), or approve an operation's retry."""
    if (run_id is None) == (operation is None):
        typer.echo("name a run, or an operation with --operation", err=True)
        raise typer.Exit(2)
    if operation is not None:
        _show_after(_call("POST", f"/v1/operations/{operation}/approval", json={
            "actor": _actor(), "note": note}), as_json)
        return
    assert run_id is not None
    pending = _pending(run_id)
    allowed = FIRST_SEND if _first_send(pending) else AFTER_SEND
    if decision is None and len(allowed) == 1:
        decision = allowed[0]
    if decision is None or decision not in allowed:
        what = ("waits for approval before its first send" if _first_send(pending) else
                "was sent already and its effect is unknown")
        typer.echo(f"run {run_id}'s call {what}: --decision "
                   f"{'|'.join(d.value for d in allowed)} (or ops reject)", err=True)
        raise typer.Exit(2)
    _show_run(_call("POST", f"/v1/runs/{run_id}/approve", json={
        "resume_token": pending["resume_token"], "decision": decision.value,
        "actor": _actor(), "note": note}), as_json)


@ops.command("reject")
def reject(run_id: str, note: Note = "", as_json: Json = False) -> None:
    """Refuse the call a run waits for: it is not run, the model is told so."""
    pending = _pending(run_id)
    _show_run(_call("POST", f"/v1/runs/{run_id}/reject", json={
        "resume_token": pending["resume_token"], "actor": _actor(), "note": note}), as_json)


@ops.command("compensate")
def compensate(operation_id: str, reference: Annotated[str, typer.Option(
        "--reference", help="the compensation's reference at the provider (the refund's, the "
        "cancellation's)")], note: Note = "", as_json: Json = False) -> None:
    """Record that a duplicate's extra effect was compensated: the verdict stays
    duplicate_effect, the operation leaves the queue (until a further effect appears)."""
    _show_after(_call("POST", f"/v1/operations/{operation_id}/compensation", json={
        "reference": reference, "actor": _actor(), "note": note}), as_json)


@ops.command("runs")
def runs(state: Annotated[str | None, typer.Option(help="e.g. awaiting_approval")] = None,
         unhealthy: Annotated[bool | None, typer.Option(
             "--unhealthy/--healthy", help="runs with (or without) a false success")] = None,
         correlation_id: Annotated[str | None, typer.Option()] = None,
         after: Annotated[str | None, typer.Option(help="the previous page's cursor")] = None,
         limit: Annotated[int, typer.Option(min=1, max=500)] = 50,
         as_json: Json = False) -> None:
    """Agent runs, filtered, a page at a time."""
    params: dict[str, str | int] = {"limit": limit}
    for name, value in (("state", state), ("correlation_id", correlation_id),
                        ("after", after)):
        if value is not None:
            params[name] = value
    if unhealthy is not None:
        params["unhealthy"] = str(unhealthy).lower()
    page = _call("GET", "/v1/runs", params=params)
    if as_json:
        typer.echo(json.dumps(page, indent=2))
        return
    now = datetime.now(UTC)
    _table(None, ["run", "state", "turn", "correlation", "since", "note"],
           [[r["run_id"], r["state"], str(r["turn"]), r["correlation_id"] or "",
             _age(r["updated_at"], now), "unhealthy" if r["unhealthy"] else
             (r["stop_reason"] or r["error_code"] or "")] for r in page["items"]])
    if page["next_cursor"]:
        typer.echo(f"more: --after {page['next_cursor']}")
