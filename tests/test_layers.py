"""The layers point down: each part of the package imports only parts of lower layers (imports
under `if TYPE_CHECKING:` aside), so the pure core never learns of the shell around it and no
import cycle can form. The README's Architecture section draws the same layers."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

#: Lowest first. A part is a top-level module or package of reconciler, or probes.
LAYERS: list[set[str]] = [
    {"domain", "errors", "serving", "metrics", "terminal", "logs", "release", "tracing",
     "command_tree"},
    {"sight"},                                                  # what a probe could have seen
    {"summary"},                                                # facts folded for the rules
    {"hashing", "verdicts", "runs", "schemas", "fixtures", "grants"},  # pure rules, wire shapes
    {"ports", "outcomes", "attention", "retention"},            # the seams; humans; forgetting
    {"schedule"},                                               # pure probe scheduling
    {"store", "ledger", "probes"},                              # facts kept; the one door
    {"gate", "sweep", "prune"},                                 # built on the ledger
    {"runtime", "client", "replay", "sandbox", "health_check"},  # drivers of the above
    {"service", "demo", "testing", "ops", "configsight",        # what a user runs or imports
     "proxy_options"},
    {"chaos", "configcheck", "effect_backends", "ops_list"},    # built on the service, demo, ops
    {"effect"},                                                 # @effect, on either backend
    {"integrations"},                                           # the frameworks' adapters
    {"mcpproxy"},                                               # the reconciling MCP proxy
    {"cli"},                                                    # the command line
    {"__main__", "__init__"},                                   # entry points
]
LAYER_OF = {part: n for n, parts in enumerate(LAYERS) for part in parts}


def part_of(module: str) -> str:
    names = module.split(".")
    if names[0] == "probes":
        return "probes"
    return names[1] if len(names) > 1 else "__init__"


def modules() -> list[tuple[str, Path]]:
    found = []
    for package in ("reconciler", "probes"):
        for path in (ROOT / package).rglob("*.py"):
            if "migrations" in path.parts:
                continue
            names = list(path.relative_to(ROOT).with_suffix("").parts)
            if names[-1] == "__init__" and len(names) > 1 and names != ["reconciler", "__init__"]:
                names = names[:-1]
            found.append((".".join(names), path))
    return found


def imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    typing_only = {id(node) for block in ast.walk(tree)
                   if isinstance(block, ast.If) and "TYPE_CHECKING" in ast.unparse(block.test)
                   for statement in block.body for node in ast.walk(statement)}
    found: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in typing_only:
            continue
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module == "reconciler":
                found |= {f"reconciler.{alias.name}" for alias in node.names}
            else:
                found.add(node.module)
    return {name for name in found if name.split(".")[0] in ("reconciler", "probes")}


def test_every_part_of_the_package_has_a_layer() -> None:
    unplaced = {part_of(name) for name, _ in modules()} - set(LAYER_OF)
    assert not unplaced, f"give these parts a layer in LAYERS: {sorted(unplaced)}"


@pytest.mark.parametrize(("module", "path"), modules(), ids=lambda v: str(v))
def test_imports_point_down(module: str, path: Path) -> None:
    own = part_of(module)
    upward = sorted(target for target in imports(path)
                    if part_of(target) != own
                    and LAYER_OF.get(part_of(target), -1) >= LAYER_OF[own])
    assert not upward, f"{module} (layer {LAYER_OF[own]}) imports {upward}, not below it"
