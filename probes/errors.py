"""Errors raised while configuring or building probes (never while probing: see `Probe`)."""

from __future__ import annotations

from reconciler.core.errors import ReconcilerError


class ProbeConfigError(ReconcilerError):
    """A probe or provider is misconfigured; fix the configuration the message names."""


class UnknownProbeError(ProbeConfigError):
    """No probe is registered under this name; the message lists the known names."""
