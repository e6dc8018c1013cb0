"""Shared fixtures. Test helpers (builders.py, databases.py, ...) sit beside the tests and are
imported by module name: pytest puts this folder on sys.path."""

import logging
import os
import socket
import threading
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from reconciler.client.effects import Recorder
from reconciler.core.ports import Store
from reconciler.integrations.tool_calls import ToolEffects
from reconciler.sandbox import RunningSandbox
from reconciler.sandbox.credentials import SANDBOX_ENV, SandboxAuth
from reconciler.store.sealing import KEY_ENV, new_key
from reconciler.testing import ManualClock, ManualMonotonic
from reconciler.testing.patience import PATIENCE_S

from databases import pg_unreachable
from runtime_harness import World, open_world
from service_harness import database
from stores import KINDS, opened

# The testing kit's fixtures: `clock` (a fresh ManualClock), `sandbox` (one sandbox server per
# module) and `sandbox_clock` (that sandbox reset, on a fresh ManualClock).
pytest_plugins = ["reconciler.testing.pytest_plugin"]

# Helpers that assert get their asserts rewritten like a test module's, so that a failure inside
# them shows the values compared. This must run before they are first imported.
pytest.register_assert_rewrite("effect_harness", "model_calls", "probe_harness",
                              "sandbox_harness", "sidecar_client")

from effect_harness import BACKENDS, PROVIDER, Provider, backend  # noqa: E402
from sidecar_client import Sidecar, running_sidecar  # noqa: E402


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--fault-scale", type=int, default=1, metavar="N",
                     help="run the fault harness (tests/test_faults_*.py) and the replica "
                     "tests N times larger: more writes, kills, fault rounds, fuzz examples "
                     "and concurrent retry rounds")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "store_kinds(*kinds): the kinds of store the `store` "
                            "fixture runs a test on (by default every kind: memory, sqlite, "
                            "postgresql)")


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """A test asking for `store` (itself or through another fixture) runs once on each kind of
    store (`stores.KINDS`), or on the kinds its `store_kinds` marker names (on the test, its
    class or its module: `pytestmark = pytest.mark.store_kinds("sqlite", "postgresql")`)."""
    if "store" in metafunc.fixturenames:
        marker = metafunc.definition.get_closest_marker("store_kinds")
        kinds = list(marker.args) if marker else KINDS
        unknown = set(kinds) - set(KINDS)
        if unknown:
            raise pytest.UsageError(f"store_kinds names unknown kinds: {sorted(unknown)}")
        metafunc.parametrize("store", kinds, indirect=True)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Every test gets a node id of its own: pytest-xdist schedules by node id, so under `-n`
    tests sharing one would run only once. schemathesis 4's cases of one test function (one per
    API operation, test_service_schema.py) have no callspec, so pytest 9 gives them all the
    function's id; the operation in each one's name becomes its id's parameters, as in the
    name. Any other clash stops the run rather than quietly skip tests."""
    shared = Counter(item.nodeid for item in items)
    for item in items:
        if shared[item.nodeid] > 1 and isinstance(item, pytest.Function) \
                and item.name.startswith(f"{item.originalname}[") and item._id.params is None:
            item._id = item._id.with_params(item.name.removeprefix(item.originalname)[1:-1])
    clashes = sorted(nodeid for nodeid, n in Counter(i.nodeid for i in items).items() if n > 1)
    if clashes:
        raise pytest.UsageError(f"tests share a node id (only one would run): {clashes}")


@pytest.fixture(autouse=True, scope="session")
def run_key() -> Iterator[str]:
    """Agent runs seal their conversation under RECONCILER_RUN_KEY: one fresh key per session
    (processes the tests start inherit it)."""
    key = new_key()
    previous = os.environ.get(KEY_ENV)
    os.environ[KEY_ENV] = key
    yield key
    if previous is None:
        del os.environ[KEY_ENV]
    else:
        os.environ[KEY_ENV] = previous


@pytest.fixture
def world(mono: ManualMonotonic) -> Iterator[World]:
    """The agent runtime's unit-test world (runtime_harness): a store, clocks, fakes. Its
    runtimes read request deadlines off the test's `mono`."""
    with open_world(mono) as opened:
        yield opened


@pytest.fixture
def mono() -> ManualMonotonic:
    """A monotonic clock moved by the test: the one `world`'s runtimes set and read request
    deadlines on (pass it as `monotonic=` to a runtime built by hand)."""
    return ManualMonotonic()


@pytest.fixture
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    """A fresh, empty store of the kind the test runs on (`pytest_generate_tests`): the
    in-memory twin, SQLite or PostgreSQL (skipped, with the reason, when it cannot be
    reached)."""
    with opened(request.param, tmp_path) as fresh:
        yield fresh


@pytest.fixture(params=["sqlite", "postgresql"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A fresh, empty store URL on each backend (PostgreSQL skipped, with the reason, when it
    cannot be reached)."""
    if request.param == "postgresql" and (reason := pg_unreachable()):
        pytest.skip(reason)
    with database(request.param, tmp_path) as url:
        yield url


# The sandbox provider over real HTTP on loopback (test_sandbox_*.py): the kit's `sandbox`, one
# server per test module; each test that asks for `client` starts from a reset state on a
# manual clock (`sandbox_clock`).


@pytest.fixture(scope="module")
def http(sandbox: RunningSandbox) -> Iterator[httpx.Client]:
    # Shared because building a client (its TLS context) costs more than most tests here; it
    # sends each provider's sandbox credential, as the sandbox asks for one.
    with httpx.Client(base_url=sandbox.url, timeout=PATIENCE_S, auth=SandboxAuth()) as shared:
        yield shared


@pytest.fixture
def client(http: httpx.Client, sandbox_clock: ManualClock) -> httpx.Client:
    return http


# The sidecar over real HTTP (test_service_*.py): a fresh store on each backend, and its own
# server on an ephemeral loopback port.


@pytest.fixture
def sidecar(store_url: str) -> Iterator[Sidecar]:
    with running_sidecar(store_url) as running:
        yield running


@pytest.fixture
def no_internal_errors(caplog: pytest.LogCaptureFixture) -> Iterator[None]:
    """Input must never reach the catch-all 500. Not autouse: the test_service_*.py modules
    ask for it with `pytestmark = pytest.mark.usefixtures("no_internal_errors")`."""
    yield
    # At teardown `caplog.records` holds the teardown's records only: the test's are its call's.
    unexpected = [r for r in caplog.get_records("call")
                  if r.name == "reconciler.service.problems" and r.levelno >= logging.ERROR]
    assert not unexpected, [r.getMessage() for r in unexpected]


# `@effect` and the framework adapters (test_effect.py, test_integration_*.py, test_mcp_proxy.py):
# one fake provider (effect_harness) per test, recorded by each backend in turn.


@pytest.fixture
def provider() -> Provider:
    return Provider()


@pytest.fixture(params=BACKENDS)
def recorder(request: pytest.FixtureRequest, provider: Provider,
             tmp_path: Path) -> Iterator[Recorder]:
    """The embedded store, then a sidecar on loopback, each probing `provider`."""
    with backend(request.param, provider, tmp_path) as b:
        yield b


@pytest.fixture
def effects(recorder: Recorder) -> ToolEffects:
    """The gate an adapter's tool calls go through, recording into `recorder`; the harness's
    charge tool sends the key it is given (`keyed`)."""
    return ToolEffects(PROVIDER, backend=recorder, keyed={"charge"})


@pytest.fixture
def silent_server() -> Iterator[str]:
    """A loopback server that accepts connections and reads, never answers: a provider that
    has the request and whose answer never comes (a real read timeout, which a mock transport
    cannot give)."""
    listener = socket.create_server(("127.0.0.1", 0))
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        listener.settimeout(0.05)
        while not stop.is_set():
            try:
                held.append(listener.accept()[0])
            except TimeoutError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{listener.getsockname()[1]}"
    stop.set()
    thread.join(5)
    for conn in [*held, listener]:
        conn.close()


@pytest.fixture
def sandbox_credentials(monkeypatch: pytest.MonkeyPatch) -> None:
    """The providers' credentials in the environment, as a deployment's would be: the
    sandbox's (`SANDBOX_ENV`), which it checks as each provider does. For a module whose
    sidecar or workers read them from the environment (examples/reconciler.toml's probes)."""
    for name, value in SANDBOX_ENV.items():
        monkeypatch.setenv(name, value)
