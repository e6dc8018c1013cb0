"""What a built probe finds an operation's effect by, read from its built spec rather than
claimed (SPEC section 3, *correlation*).

A probe's `Sight` is what it covers (the configuration's `actions`) and what it finds effects
by. The second is derived here from the identifiers its reads put in front of the provider or
hold the provider's objects against:

    {operation_id}                    Carried.OPERATION_ID   (metadata, a marker in a body)
    {idempotency_key}                 Carried.IDEMPOTENCY_KEY
    {correlation[NAME]} in the path   Carried.PROVIDER_REF   (a read by id: the object the
      or params of a one-object read                          provider returned a ref for)

For a list read, a `{correlation[NAME]}` in its path or params says *where* to look (a channel,
a repository, a phone number), not *which* object is the operation's: it identifies nothing.
An identifier counts only where an empty answer depends on it: for a one-object read, what
locates the object (path, params, headers); for a list, what narrows it (params, path,
headers) and what each item is held against (`where`, `contains`, `member`, `marker`).

A read that needs two identifiers at once (an item must hold the operation id *and* the key)
finds nothing by either alone, and a `Sight` says "any of": such a read is derived to find
effects by nothing, so its empty answers never count as a zero (the safe side), and
`check-config` says why. So is a read held against something no request carries (a
`{request_hash}` in a `where`), and a list read that narrows by nothing of the operation's
(Twilio's list by recipient and date).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from probes.matching import Extraction, FieldCheck
from probes.templates import Template
from reconciler.core.domain import Carried

#: Template fields that identify an operation's request, and what the request carried for them.
_IDENTIFIES = {"operation_id": Carried.OPERATION_ID, "idempotency_key": Carried.IDEMPOTENCY_KEY}
#: A field that only a request could carry, and no `Carried` stands for: a read held against it
#: finds effects by nothing a request can say it carried.
_UNCARRIABLE = frozenset({"request_hash"})


def needs(probe: object) -> frozenset[str] | None:
    """Every identifier a built-in probe's empty answer depends on (`Carried` values, or
    `request_hash`); None for a probe this module cannot read (a plugin: it declares its own)."""
    spec = getattr(probe, "spec", None)
    extraction = getattr(spec, "extraction", None)
    if spec is not None and isinstance(extraction, Extraction):
        locators = [spec.path, *spec.params.values(), *spec.headers.values()]
        return _needs(locators, extraction)
    extraction = getattr(probe, "extraction", None)
    arguments = getattr(probe, "arguments", None)
    if isinstance(extraction, Extraction) and isinstance(arguments, dict):  # mcp_read
        return _needs(list(arguments.values()), extraction)
    return None


def finds_by(needed: frozenset[str]) -> frozenset[Carried]:
    """What a read that needs `needed` finds effects by: its one identifier, else nothing."""
    if len(needed) != 1 or needed & _UNCARRIABLE:
        return frozenset()
    return frozenset({Carried(next(iter(needed)))})


def _needs(locators: Iterable[Any], extraction: Extraction) -> frozenset[str]:
    templates = [t for t in locators if isinstance(t, Template)]
    needed = set(_identifiers(templates))
    if extraction.single:
        # A one-object read: a 404 (the only zero it gives) depends on what located it.
        if any(name.startswith("correlation[") for t in templates for name in t.fields):
            needed.add(Carried.PROVIDER_REF.value)
        return frozenset(needed)
    checks: list[FieldCheck] = [*extraction.where]
    needed.update(_identifiers(c.expected for c in checks if isinstance(c.expected, Template)))
    if getattr(extraction, "marker", None) is not None:
        needed.add(Carried.OPERATION_ID.value)
    return frozenset(needed)


def _identifiers(templates: Iterable[Template]) -> set[str]:
    return {name if name in _UNCARRIABLE else _IDENTIFIES[name].value
            for template in templates for name in template.fields
            if name in _IDENTIFIES or name in _UNCARRIABLE}
