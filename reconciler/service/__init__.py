"""The sidecar's HTTP service: `create_app` builds it, `server.serve` runs it."""

from reconciler.service.app import create_app
from reconciler.service.settings import Settings, SettingsError, load_settings

__all__ = ["Settings", "SettingsError", "create_app", "load_settings"]
