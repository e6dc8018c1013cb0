"""Every snippet in README.md and docs/ runs, and no doc names a file that is not there (issue 34
item 2). The conventions a doc's writer follows are in docs/testing.md, "Snippets that run".

A fenced block is code by its language tag: `python`, `sh`/`bash`/`console` and `toml` blocks
run; anything else (`text`, `json`, `ts`, an untagged drawing) is read, not run. A runnable block
that cannot run here says why in its fence (```python no-run: needs a Stripe account); one too
slow for the default suite says so too (```sh slow: the demo runs for a minute) and runs under
`-m slow`. A page's Python blocks run in order in one interpreter, its shell blocks in one bash,
as a reader would type them, against a sandbox provider ($SANDBOX_URL) and a served sidecar
($RECONCILER_URL, which also replaces the docs' `localhost:8765`).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from typer.testing import CliRunner

from reconciler.cli import app
from reconciler.sandbox import RunningSandbox
from reconciler.service.app import create_app
from reconciler.service.settings import Settings

from service_harness import serving

ROOT = Path(__file__).resolve().parent.parent
# clients/typescript/README.md is not here: its own npm tests run its examples.
DOCS = sorted([ROOT / "README.md", *(ROOT / "docs").rglob("*.md")])
SHELLS = {"sh", "bash", "console"}
RUNNABLE = {"python", "toml", *SHELLS}
BLOCK_TIMEOUT_S = 120.0  # a page's whole session; generous for a loaded 2-core machine
FENCE = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|~{3,})(?P<info>.*)$")


class AnnotationError(ValueError):
    """A fence whose words after the language are not `no-run: REASON` or `slow: REASON`."""


@dataclass(frozen=True)
class Block:
    doc: Path
    line: int  # of the block's first line of code, 1-based
    lang: str
    code: str
    mode: str  # "run", "slow" or "no-run"
    reason: str

    @property
    def where(self) -> str:
        return f"{self.doc.relative_to(ROOT)}:{self.line}"


def annotation(info: str, where: str) -> tuple[str, str, str]:
    """(language, mode, reason) from a fence's info string."""
    lang, _, rest = info.strip().partition(" ")
    rest = rest.strip()
    if not rest or lang not in RUNNABLE:
        return lang, "run", ""
    mode, colon, reason = rest.partition(":")
    if mode not in ("no-run", "slow") or not colon or not reason.strip():
        raise AnnotationError(
            f"{where}: fence '{info.strip()}': after the language write 'no-run: REASON' "
            f"or 'slow: REASON' (docs/testing.md)")
    return lang, mode, reason.strip()


def blocks(doc: Path, text: str | None = None) -> list[Block]:
    """The fenced blocks of a Markdown file, their indentation (a list item's) removed."""
    lines = (doc.read_text(encoding="utf-8") if text is None else text).splitlines()
    found: list[Block] = []
    i = 0
    while i < len(lines):
        opening = FENCE.match(lines[i])
        i += 1
        if not opening:
            continue
        indent, fence = len(opening["indent"]), opening["fence"]
        first = i
        while i < len(lines) and not re.fullmatch(rf"[ \t]*{fence[0]}{{{len(fence)},}}[ \t]*",
                                                  lines[i]):
            i += 1
        code = "\n".join(line[indent:] for line in lines[first:i]) + "\n"
        lang, mode, reason = annotation(opening["info"], f"{doc}:{first}")
        found.append(Block(doc, first + 1, lang, code, mode, reason))
        i += 1
    return found


def runnable(mode: str) -> list[Block]:
    return [b for doc in DOCS for b in blocks(doc) if b.lang in RUNNABLE and b.mode == mode]


def pages(langs: set[str]) -> list[list[Block]]:
    """Each page's blocks in `langs` that run in the default suite, in order: one session."""
    by_doc: dict[Path, list[Block]] = {}
    for block in runnable("run"):
        if block.lang in langs:
            by_doc.setdefault(block.doc, []).append(block)
    return list(by_doc.values())


def by_page(sessions: list[list[Block]]) -> list[object]:
    return [pytest.param(s, id=str(s[0].doc.relative_to(ROOT))) for s in sessions]


def by_place(found: list[Block]) -> list[object]:
    return [pytest.param(b, id=b.where) for b in found]


# --- the servers a page runs against ------------------------------------------------------------

@pytest.fixture(scope="module")
def sidecar(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    folder = tmp_path_factory.mktemp("sidecar")
    settings = Settings(db=f"sqlite:///{folder / 'r.db'}", sweep_interval_s=0)
    with serving(create_app(settings)) as url:
        yield url


@pytest.fixture
def session_env(sidecar: str, sandbox: RunningSandbox) -> dict[str, str]:
    """What a reader has: the venv's commands on PATH (README: `source .venv/bin/activate`), the
    sidecar and the sandbox provider, no sidecar settings or token of this machine's."""
    bin_dir = str(Path(sys.executable).parent)
    sandbox.state.reset()
    own = {k: v for k, v in os.environ.items() if not k.startswith("RECONCILER_")}
    return {**own, "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}",
            "RECONCILER_URL": sidecar, "SANDBOX_URL": sandbox.url}


@pytest.fixture
def clone(tmp_path: Path) -> Path:
    """Where a page's blocks run: as at the root of a clone (README: "from a clone of this
    repository"), the repository's files linked in, what a block writes kept out of it."""
    for entry in ROOT.iterdir():
        if not entry.name.startswith(".") and entry.name not in ("build", "dist"):
            (tmp_path / entry.name).symlink_to(entry)
    return tmp_path


def served(code: str, env: dict[str, str]) -> str:
    """The docs' default addresses (the sidecar on :8765, the sandbox on :8081) aimed at the
    servers this test started on ephemeral ports."""
    for default, url in (("8765", env["RECONCILER_URL"]), ("8081", env["SANDBOX_URL"])):
        here = urlsplit(url).netloc
        code = re.sub(rf"(?:https?://)?(?:localhost|127\.0\.0\.1):{default}\b",
                      f"http://{here}", code)
    return code


# Runs a page's Python blocks in order in one namespace; each compiled under its doc's name and
# lines, so a traceback points at the page.
PYTHON_SESSION = """
import json, sys
namespace = {"__name__": "__main__"}
for where, line, code in json.load(sys.stdin):
    exec(compile("\\n" * (line - 1) + code, where, "exec"), namespace)
"""


def run_python(session: list[Block], env: dict[str, str], cwd: Path) -> None:
    source = json.dumps([(str(b.doc.relative_to(ROOT)), b.line, served(b.code, env))
                         for b in session])
    done = subprocess.run([sys.executable, "-c", PYTHON_SESSION], input=source, env=env,
                          cwd=cwd, capture_output=True, text=True, timeout=BLOCK_TIMEOUT_S)
    if done.returncode != 0:
        pytest.fail(f"{session[0].where}: the page's Python blocks failed:\n"
                    f"{done.stdout}{done.stderr}", pytrace=False)


# curl fails on an HTTP error answer (a snippet whose request is refused does not "run"); the
# ERR trap names the block a failing command came from.
SHELL_PRELUDE = """set -Eeo pipefail
curl() { command curl --fail-with-body --silent --show-error --max-time 30 "$@"; }
trap 'echo "failed in block $BLOCK" >&2' ERR
"""


def shown_answers(code: str) -> list[str]:
    """The JSON members a block's comments show as an answer (`# {"allowed":false, ...}`, a
    comment line going on in the next `#  ` one), each as the compact text the sidecar prints."""
    shown = re.findall(r"^\s*# (\{.*(?:\n\s*#  .*)*)", code, flags=re.MULTILINE)
    text = " ".join(re.sub(r"\n\s*#\s+", " ", answer) for answer in shown)
    return re.findall(r'"\w+":(?:"[^"]*"|\[[^\]]*\]|true|false|null|-?\d+)', text)


def run_shell(session: list[Block], env: dict[str, str], cwd: Path) -> None:
    script = SHELL_PRELUDE + "".join(f"BLOCK={b.where}\nprintf '\\n@@ %s\\n' {b.where}\n"
                                     f"{served(b.code, env)}" for b in session)
    done = subprocess.run(["bash", "-c", script], env=env, cwd=cwd, capture_output=True,
                          text=True, timeout=BLOCK_TIMEOUT_S)
    if done.returncode != 0:
        pytest.fail(f"{session[0].where}: the page's shell blocks failed:\n"
                    f"{done.stdout}{done.stderr}", pytrace=False)
    # What a page shows a command answering is what it answered.
    printed = dict(re.findall(r"^@@ (\S+)\n(.*?)(?=^@@ |\Z)", done.stdout,
                              flags=re.MULTILINE | re.DOTALL))
    for block in session:
        wrong = [m for m in shown_answers(block.code) if m not in printed[block.where]]
        assert not wrong, (f"{block.where}: the page shows {wrong}, the block printed:\n"
                           f"{printed[block.where]}")


# --- the rules ---------------------------------------------------------------------------------

@pytest.mark.parametrize("session", by_page(pages({"python"})))
def test_a_pages_python_blocks_run(session: list[Block], session_env: dict[str, str],
                                   clone: Path) -> None:
    run_python(session, session_env, clone)


@pytest.mark.parametrize("session", by_page(pages(SHELLS)))
def test_a_pages_shell_blocks_run(session: list[Block], session_env: dict[str, str],
                                  clone: Path) -> None:
    run_shell(session, session_env, clone)


@pytest.mark.slow
@pytest.mark.parametrize("block", by_place(runnable("slow")))
def test_a_slow_block_runs_on_its_own(block: Block, session_env: dict[str, str],
                                      clone: Path) -> None:
    if block.lang == "python":
        run_python([block], session_env, clone)
    elif block.lang in SHELLS:
        run_shell([block], session_env, clone)
    else:
        pytest.fail(f"{block.where}: a {block.lang} block is checked, never slow")


def placeholders(toml: str) -> dict[str, str]:
    """A value for each variable the file names (`token_env = "NAME"`): credentials come from
    the environment, never the file, and a deployment sets them."""
    names = re.findall(r'_env\s*=\s*"(\w+)"', toml)
    return {name: "placeholder-credential-0123456789" for name in names}


@pytest.mark.parametrize("block", by_place([b for b in runnable("run") if b.lang == "toml"]))
def test_a_toml_block_passes_check_config(block: Block, tmp_path: Path) -> None:
    config = tmp_path / "reconciler.toml"
    config.write_text(block.code, encoding="utf-8")
    result = CliRunner().invoke(app, ["check-config", str(config)],
                                env=placeholders(block.code))
    assert result.exit_code == 0, f"{block.where}: check-config says:\n{result.output}"


def test_the_docs_have_blocks_of_each_language_that_run() -> None:
    # Collecting parses every fence: an annotation without its reason stops the module's
    # collection with the file and line (test below); here, that the collector reads the docs.
    assert {b.lang for b in runnable("run")} >= {"python", "sh", "toml"}


def test_a_runnable_fence_with_an_annotation_but_no_reason_is_an_error() -> None:
    with pytest.raises(AnnotationError, match="no-run: REASON"):
        blocks(ROOT / "x.md", "```python no-run\nprint(1)\n```\n")
    with pytest.raises(AnnotationError, match="no-run: REASON"):
        blocks(ROOT / "x.md", "```sh skip: later\nls\n```\n")


def test_output_and_drawings_are_decided_by_language_and_never_run() -> None:
    text = ("```json\n{}\n```\n```\n a ─▶ b\n```\n- item:\n  ```python\n  x = 1\n  ```\n"
            "```sh no-run: serves in the foreground\nreconciler serve\n```\n")
    found = blocks(ROOT / "x.md", text)
    assert [(b.lang, b.mode, b.code, b.line) for b in found] == [
        ("json", "run", "{}\n", 2), ("", "run", " a ─▶ b\n", 5), ("python", "run", "x = 1\n", 9),
        ("sh", "no-run", "reconciler serve\n", 12)]
    assert [b for b in found if b.lang in RUNNABLE and b.mode == "run"] == [found[2]]


# --- the files a doc names ---------------------------------------------------------------------

LINK = re.compile(r"\]\(([^)\s]+)\)")


def folders(base: Path) -> str:
    return "|".join(sorted(p.name for p in base.iterdir() if p.is_dir() and p.name[0] not in "._"
                           and not p.name.endswith(".egg-info") and p.name != "node_modules"))


# A repository path in the text: a top-level folder, then a file, folder or glob
# (`tests/test_faults_*.py`); not part of a URL or an absolute path.
PATH = re.compile(rf"(?<![\w./:@~$-])(?:{folders(ROOT)})/[\w./*-]*[\w/*]")
# A file named from inside a package (`store/folds.py` for reconciler/store/folds.py).
NESTED = re.compile(
    rf"`((?:{folders(ROOT / 'reconciler')}|{folders(ROOT / 'probes')})/[\w./-]+\.\w+)`")


def named_paths(doc: Path) -> set[str]:
    text = doc.read_text(encoding="utf-8")
    return {m.group(0) for m in PATH.finditer(text)} | {m.group(1) for m in NESTED.finditer(text)}


def missing_links(doc: Path) -> list[str]:
    missing = []
    for target in LINK.findall(doc.read_text(encoding="utf-8")):
        if re.match(r"[a-z][a-z0-9+.-]*:|#", target):
            continue  # a URL or an anchor on the same page
        if not (doc.parent / target.split("#")[0]).exists():
            missing.append(f"]({target})")
    return missing


def exists(name: str, doc: Path) -> bool:
    # From the repository's root, the page's folder, or (`store/folds.py`) the packages.
    bases = [ROOT, doc.parent, ROOT / "reconciler", ROOT / "probes"]
    return any(next(base.glob(name.rstrip(".")), None) is not None for base in bases)


@pytest.mark.parametrize("doc", [pytest.param(d, id=str(d.relative_to(ROOT))) for d in DOCS])
def test_no_doc_names_a_file_that_does_not_exist(doc: Path) -> None:
    missing = missing_links(doc) + sorted(n for n in named_paths(doc) if not exists(n, doc))
    assert not missing, f"{doc.relative_to(ROOT)} names what is not there: {missing}"


def test_an_answer_a_page_shows_is_read_member_by_member() -> None:
    code = ('curl -s localhost:8765/v1/x\n# {"allowed":false,"verdict":"indeterminate","reason":"no'
            '\n#  retry", "n": 3, ...}\n# {..., "findings":["a","b"],\n#  "next":null}\n')
    assert shown_answers(code) == ['"allowed":false', '"verdict":"indeterminate"',
                                   '"reason":"no retry"', '"findings":["a","b"]', '"next":null']


def test_a_shell_block_must_print_the_answer_its_page_shows(session_env: dict[str, str],
                                                            clone: Path) -> None:
    def block(shown: str) -> Block:
        return Block(ROOT / "x.md", 2, "sh", f"curl -s localhost:8765/healthz\n# {shown}\n",
                     "run", "")

    run_shell([block('{"status":"ok"}')], session_env, clone)
    with pytest.raises(AssertionError, match=re.escape("""shows ['"status":"down"']""")):
        run_shell([block('{"status":"down"}')], session_env, clone)
    with pytest.raises(pytest.fail.Exception, match=re.escape("failed in block x.md:2")):
        run_shell([Block(ROOT / "x.md", 2, "sh", "curl -s localhost:8765/v1/nothing\n", "run",
                         "")], session_env, clone)


def test_a_named_path_that_is_not_there_is_found(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text("See `reconciler/effect_outcomes.py`, [x](nowhere.md), "
                    "[ok](https://example.com/docs/x.md) and `reconciler/core/summary.py`.\n")
    assert missing_links(page) == ["](nowhere.md)"]
    assert sorted(n for n in named_paths(page) if not exists(n, page)) == [
        "reconciler/effect_outcomes.py"]
