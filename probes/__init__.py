"""Probes: ask a provider what actually happened to an operation.

A probe is one method, `probe(target) -> Observation | Receipt`. It reads, never writes: a probe
never retries or repeats the side effect. Probes are found by name through the entry-point group
`reconciler.probes`, so a third party can ship one as its own package (docs/probes.md).
"""

from probes.base import Probe, ProbeFactory, ProbeTarget
from probes.config import ProviderSetup, load_config, parse_config
from probes.errors import ProbeConfigError, UnknownProbeError
from probes.registry import ENTRY_POINT_GROUP, ProbeRegistry, default_registry
from probes.runner import run_probe, run_probes

__all__ = [
    "ENTRY_POINT_GROUP",
    "Probe",
    "ProbeConfigError",
    "ProbeFactory",
    "ProbeRegistry",
    "ProbeTarget",
    "ProviderSetup",
    "UnknownProbeError",
    "default_registry",
    "load_config",
    "parse_config",
    "run_probe",
    "run_probes",
]
