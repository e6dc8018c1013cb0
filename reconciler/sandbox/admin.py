"""The sandbox's own endpoints: read-side config, reset, a dump of every object, liveness."""

from __future__ import annotations

from fastapi import APIRouter

from reconciler.sandbox.state import JSONObject, SandboxConfig
from reconciler.sandbox.wire import State

router = APIRouter(tags=["sandbox"])


@router.post("/_sandbox/config")
async def configure(update: SandboxConfig, state: State) -> SandboxConfig:
    """Change the fields sent (the rest stay) and answer the whole config."""
    return state.configure(**update.model_dump(exclude_unset=True))


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
