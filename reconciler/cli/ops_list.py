"""`reconciler ops list`: the operations the sidecar holds, filtered as GET /v1/operations
filters them (verdict, provider, whether a human must act), a page at a time.

    reconciler ops list --verdict indeterminate --provider stripe
    reconciler ops list --escalated --limit 20
    reconciler ops list --after OP          the next page (the previous page says which)

It joins the `ops` group of reconciler/cli/ops.py when that group is loaded
(reconciler/cli/__init__.py).
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Annotated

import typer

from reconciler.cli.ops import Json, _age, _call, _table, ops
from reconciler.core.domain import Verdict


@ops.command("list")
def list_operations(
    verdict: Annotated[Verdict | None, typer.Option(
        metavar="VERDICT", help="only operations whose last verdict is this one: "
        + ", ".join(Verdict))] = None,
    provider: Annotated[str | None, typer.Option(help="only this provider's operations")
                        ] = None,
    escalated: Annotated[bool | None, typer.Option(
        "--escalated/--not-escalated", help="only those a human must act on (escalated and "
        "still undecided, or next action escalate_to_human), or only the others")] = None,
    after: Annotated[str | None, typer.Option(
        metavar="OPERATION", help="the previous page's last operation, as it says")] = None,
    limit: Annotated[int, typer.Option(min=1, max=500, help="operations on a page")] = 50,
    as_json: Json = False,
) -> None:
    """Operations in id order, filtered by verdict, provider and whether a human must act."""
    filters = {"verdict": verdict and verdict.value, "provider": provider, "after": after,
               "escalated": None if escalated is None else str(escalated).lower()}
    page = _call("GET", "/v1/operations", params={
        "limit": limit, **{name: value for name, value in filters.items() if value is not None}})
    if as_json:
        typer.echo(json.dumps(page, indent=2))
        return
    now = datetime.now(UTC)
    _table(None, ["operation", "provider", "action", "verdict", "next", "since", "human"],
           [[op["operation_id"], op["provider"], op["action"], op["verdict"],
             op["next_action"], _age(op["updated_at"], now), op["reason"] or ""]
            for op in page["items"]])
    if page["next_cursor"]:
        typer.echo(f"more: --after {page['next_cursor']}")
