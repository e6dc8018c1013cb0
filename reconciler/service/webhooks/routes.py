"""The one router every provider module adds its route to (one flat list of routes, so that
405 answers and the OpenAPI document see them all)."""

from __future__ import annotations

from fastapi import APIRouter

router = APIRouter(prefix="/v1/webhooks", tags=["webhooks"])
