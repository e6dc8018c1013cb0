"""The layers are the folders: `ls reconciler/` shows them, each part of the package imports only
parts of lower layers (imports under `if TYPE_CHECKING:` aside), the pure core imports nothing of
the shell and does no I/O, and no import cycle forms anywhere. The README's Architecture drawing
and Layout table name the same folders in the same order (checked here too)."""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "reconciler"

#: The folders of reconciler/ (and the top-level `probes`), lowest layer first. A folder imports
#: only folders of the layers below its own; folders of one layer do not import each other.
LAYERS: list[tuple[str, set[str]]] = [
    ("pure core", {"core"}),
    ("infrastructure", {"infra"}),
    ("facts kept, evidence read", {"store", "probes"}),
    ("the one door", {"ledger"}),
    ("drivers", {"client", "runtime", "sandbox"}),
    ("what a user runs", {"service", "demo", "testing"}),
    ("built on the service", {"chaos", "effect"}),
    ("the frameworks", {"integrations"}),
    ("the MCP proxy", {"mcpproxy"}),
    ("the tools", {"cli"}),
]
LAYER_OF = {part: n for n, (_, parts) in enumerate(LAYERS) for part in parts}

#: Inside the pure core, the rules build on each other in this order (lowest first).
CORE: list[set[str]] = [
    {"domain", "errors"},
    {"sight", "hashing"},
    {"summary"},
    {"verdicts", "runs", "schemas", "grants"},
    {"ports", "outcomes", "attention", "retention"},
    {"schedule"},
]
CORE_LAYER_OF = {part: n for n, parts in enumerate(CORE) for part in parts}

#: What the pure core may import from outside itself: the standard library's pure parts and
#: two libraries of pure functions (canonical JSON; the wire's shapes). No sockets, files, clocks,
#: threads, processes, loggers or databases.
CORE_MAY_IMPORT = {"__future__", "collections", "dataclasses", "datetime", "enum", "functools",
                   "hashlib", "hmac", "inspect", "itertools", "json", "math", "re", "secrets",
                   "typing", "rfc8785", "pydantic", "pydantic_core"}

#: Files of reconciler/ that are not layers: the package's face, its entry point, its schema
#: history (Alembic's, loaded by path) and the typing marker.
NOT_LAYERS = {"__init__.py", "__main__.py", "migrations", "py.typed", "__pycache__"}


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
            if names[-1] == "__init__":
                names = names[:-1]
            found.append((".".join(names), path))
    return found


MODULES = dict(modules())


def imported(path: Path) -> set[str]:
    """Every module `path` imports at run time, named as imported (`from a import b` is `a.b`
    where b is a module, else `a`)."""
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
            found |= {f"{node.module}.{alias.name}" if f"{node.module}.{alias.name}" in MODULES
                      else node.module for alias in node.names}
    return found


def own(names: set[str]) -> set[str]:
    return {name for name in names if name.split(".")[0] in ("reconciler", "probes")}


def test_the_folders_are_the_layers() -> None:
    entries = {entry.name for entry in PACKAGE.iterdir()} - NOT_LAYERS
    loose = sorted(name for name in entries if not (PACKAGE / name).is_dir())
    assert not loose, f"move these modules into a layer's folder: {loose}"
    unplaced = sorted(entries - set(LAYER_OF))
    assert not unplaced, f"give these folders a layer in LAYERS: {unplaced}"
    gone = sorted(set(LAYER_OF) - entries - {"probes"})
    assert not gone, f"LAYERS names folders that do not exist: {gone}"


@pytest.mark.parametrize(("module", "path"), sorted(MODULES.items()), ids=lambda v: str(v))
def test_imports_point_down(module: str, path: Path) -> None:
    mine = part_of(module)
    if mine in ("__init__", "__main__"):
        return  # the entry points: the face imports on first use (PEP 562), `-m` runs the CLI
    upward = sorted(target for target in own(imported(path))
                    if part_of(target) != mine
                    and LAYER_OF.get(part_of(target), len(LAYERS)) >= LAYER_OF[mine])
    assert not upward, f"{module} (layer {LAYER_OF[mine]}) imports {upward}, not below it"


CORE_MODULES = sorted((module, path) for module, path in MODULES.items()
                      if module.startswith("reconciler.core."))


@pytest.mark.parametrize(("module", "path"), CORE_MODULES, ids=lambda v: str(v))
def test_the_core_imports_nothing_of_the_shell_and_does_no_io(module: str, path: Path) -> None:
    names = imported(path)
    shell = sorted(name for name in own(names) if not name.startswith("reconciler.core."))
    assert not shell, f"{module} imports the shell: {shell}"
    io = sorted(name for name in names - own(names)
                if name.split(".")[0] not in CORE_MAY_IMPORT)
    assert not io, f"{module} imports {io}: the pure core does no I/O"
    mine = CORE_LAYER_OF[module.split(".")[2]]
    upward = sorted(name for name in own(names)
                    if name.split(".")[2] != module.split(".")[2]
                    and CORE_LAYER_OF[name.split(".")[2]] >= mine)
    assert not upward, f"{module} imports {upward}, not below it in CORE"


def test_every_core_module_has_a_place_in_the_core_order() -> None:
    unplaced = sorted({module.split(".")[2] for module, _ in CORE_MODULES} - set(CORE_LAYER_OF))
    assert not unplaced, f"give these core modules a place in CORE: {unplaced}"


def test_no_import_cycle() -> None:
    graph = {module: sorted(target for target in own(imported(path)) if target in MODULES)
             for module, path in MODULES.items()}
    state: dict[str, int] = {}  # 1: on the current path; 2: done
    path: list[str] = []

    def visit(module: str) -> list[str] | None:
        state[module] = 1
        path.append(module)
        for target in graph[module]:
            if state.get(target) == 1:
                return [*path[path.index(target):], target]
            if target not in state and (cycle := visit(target)):
                return cycle
        state[module] = 2
        path.pop()
        return None

    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10 * len(graph)))
    for module in sorted(graph):
        if module not in state and (cycle := visit(module)):
            pytest.fail(f"import cycle: {' -> '.join(cycle)}")


def readme_section(title: str) -> str:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    return text.split(f"\n## {title}\n", 1)[1].split("\n## ", 1)[0]


def test_the_readme_drawing_shows_the_layers_in_order() -> None:
    drawing = readme_section("Architecture").split("```", 2)[1]
    # A layer's row: its title, two spaces or more, then its folders (`name/`) among notes.
    rows = [re.match(r" (\S.*?) {2,}(.*)$", line) for line in drawing.splitlines()[1:]]
    drawn = [(row[1], set(re.findall(r"([a-z_]+)/", row[2]))) for row in rows if row]
    assert list(reversed(drawn)) == LAYERS


def test_the_readme_layout_names_every_folder() -> None:
    table = readme_section("Layout")
    named = set(re.findall(r"`reconciler/([a-z_]+)/`", table))
    folders = {entry.name for entry in PACKAGE.iterdir() if entry.is_dir()} - {"__pycache__"}
    assert named == folders, (f"README Layout: missing {sorted(folders - named)}, "
                              f"no such folder {sorted(named - folders)}")
