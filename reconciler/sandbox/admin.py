"""The sandbox's own endpoints: read-side config, reset, a dump of every object, liveness."""

from __future__ import annotations

from typing import Literal

from fastapi import APIRouter
from pydantic import BaseModel, ConfigDict

from reconciler.sandbox.faults import parse_faults
from reconciler.sandbox.state import JSONObject, SandboxConfig
from reconciler.sandbox.wire import State

router = APIRouter(tags=["sandbox"])


@router.post("/_sandbox/config")
async def configure(update: SandboxConfig, state: State) -> SandboxConfig:
    """Change the fields sent (the rest stay) and answer the whole config."""
    return state.configure(**update.model_dump(exclude_unset=True))


class ArmedFault(BaseModel):
    """Faults for the next write (or read) under a provider's root, for clients that send no
    header."""

    model_config = ConfigDict(extra="forbid")

    provider: Literal["pay", "mail", "chat", "gh", "twilio", "calendar", "jira"]
    fault: str
    on: Literal["write", "read"] = "write"


@router.post("/_sandbox/faults")
async def arm_fault(armed: ArmedFault, state: State) -> JSONObject:
    parse_faults(armed.fault)  # a typo is an error now, not at the write
    state.arm(armed.provider, armed.fault, armed.on)
    return {"ok": True}


@router.post("/_sandbox/reset")
async def reset(state: State) -> JSONObject:
    state.reset()
    return {"ok": True}


@router.get("/_sandbox/objects")
async def objects(state: State) -> JSONObject:
    return {
        "objects": [
            {
                "provider": r.provider,
                "scope": r.scope,
                "ref": r.ref,
                "created_at": r.created_at,
                "request_hash": r.request_hash,
                "data": r.data,
            }
            for r in state.objects()
        ]
    }


@router.get("/healthz")
async def healthz() -> JSONObject:
    return {"ok": True}
