"""Which release of the package this is: `reconciler --version`, the OpenAPI's version."""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

DISTRIBUTION = "effect-reconciler"


def release() -> str:
    """The installed distribution's version; 0+unknown when run from a tree not installed."""
    try:
        return version(DISTRIBUTION)
    except PackageNotFoundError:
        return "0+unknown"
