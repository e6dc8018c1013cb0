"""`reconciler check-config FILE`: every mistake with its file and line, a provider without probes
as a warning, exit codes 0/1/2; and `--live`, which runs each probe of one recorded operation's
provider once and records nothing."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import pytest
from sqlalchemy import func, select
from test_trust_messages import shipped_configurations
from typer.testing import CliRunner

from probes.base import ProbeTarget
from probes.recipes import recipe_factory
from reconciler.cli import app
from reconciler.cli.options import EXIT_BAD_INPUT
from reconciler.core.domain import Authority, Carried, Effect, Intent, Observation
from reconciler.mcpproxy.serve import load_settings as load_proxy_settings
from reconciler.store.schema import open_store
from reconciler.store.tables import EvidenceRow

from builders import H0, K0

CONFIGS = Path(__file__).parent / "data" / "check_config"
runner = CliRunner()


def check(*args: str | Path, env: dict[str, str] | None = None) -> tuple[int, list[str]]:
    result = runner.invoke(app, ["check-config", *map(str, args)], env=env)
    return result.exit_code, result.output.splitlines()


def test_a_valid_file_exits_0_and_warns_of_a_provider_without_probes() -> None:
    code, lines = check(CONFIGS / "valid.toml", env={"CHECK_CONFIG_PAYMENTS_KEY": "k"})
    assert code == 0
    assert lines == [
        f"{CONFIGS / 'valid.toml'}:20: warning: provider 'chat' has no probe: its operations "
        "are decided only from posted evidence and escalate at their deadline",
        f"{CONFIGS / 'valid.toml'}: 2 provider(s), 1 probe(s) built; 0 error(s), 1 warning(s)"]


def test_an_unset_credential_variable_is_a_warning_that_says_the_probe_reads_unavailable(
        ) -> None:
    code, lines = check(CONFIGS / "valid.toml", env={"CHECK_CONFIG_PAYMENTS_KEY": ""})
    assert code == 0
    assert f"{CONFIGS / 'valid.toml'}:8: warning: providers.payments.probes[0] " \
           "(payments.lookup): CHECK_CONFIG_PAYMENTS_KEY is not set here: the probe sends no " \
           "request and reads `unavailable` (no credentials), so it proves neither an effect " \
           "nor its absence, and the provider's doubtful operations go to a human" in lines


@pytest.mark.parametrize("unset", [["TWILIO_ACCOUNT_SID"], ["TWILIO_AUTH_TOKEN"],
                                   ["TWILIO_ACCOUNT_SID", "TWILIO_AUTH_TOKEN"]])
def test_every_variable_a_recipe_reads_is_checked_the_basic_auth_user_too(
        unset: list[str]) -> None:
    env = {"TWILIO_ACCOUNT_SID": "AC0123456789abcdef0123456789abcdef", "TWILIO_AUTH_TOKEN": "t",
           **dict.fromkeys(unset, "")}
    code, lines = check(CONFIGS / "twilio.toml", env=env)
    assert code == 0
    warned = [line for line in lines if "is not set here" in line]
    assert [line.split(": ")[3].split()[0] for line in warned] == unset
    assert all(line.startswith(f"{CONFIGS / 'twilio.toml'}:6: warning: providers.sms.probes[0] "
                               "(sms.by_sid): ") for line in warned)


def test_what_the_warning_says_is_what_the_probe_does_it_sends_nothing_and_reads_unavailable(
        ) -> None:
    sent: list[httpx.Request] = []

    def answer(request: httpx.Request) -> httpx.Response:
        sent.append(request)
        return httpx.Response(500)

    probe = recipe_factory("twilio.message")(
        "sms.by_sid", {"account_sid": "AC0123456789abcdef0123456789abcdef",
                       "base_url": "https://api.twilio.com"},
        {"TWILIO_AUTH_TOKEN": "t"},
        transport=httpx.MockTransport(answer))
    intent = Intent("op-1", H0, None, "sms", "send_sms", Effect.NON_IDEMPOTENT,
                    datetime.now(UTC), correlation={"message_sid": "SM" + "0" * 32})
    seen = probe.probe(ProbeTarget.of(intent))
    assert sent == []
    assert isinstance(seen, Observation) and seen.authority is Authority.UNAVAILABLE
    assert seen.error == "credentials not set: TWILIO_ACCOUNT_SID"


def test_with_every_credential_set_nothing_is_said_of_them() -> None:
    env = {"TWILIO_ACCOUNT_SID": "AC0123456789abcdef0123456789abcdef", "TWILIO_AUTH_TOKEN": "t"}
    code, lines = check(CONFIGS / "twilio.toml", env=env)
    assert code == 0
    assert not [line for line in lines if "is not set" in line]


def test_every_mistake_is_reported_with_its_line_and_exit_1() -> None:
    path = CONFIGS / "mistakes.toml"
    code, lines = check(path)
    assert code == 1
    assert lines[0] == f"{path}: error: unknown top-level key 'top_level_typo'; the file holds " \
                       "[service] and [providers.*]"
    assert lines[1].startswith(f"{path}:14: error: providers.payments.probes[1]: no probe "
                               "named 'no_such_probe'; known probes: ")
    assert lines[2] == (f"{path}:17: error: providers.payments.probes[2]: probe 'http_json': "
                        "option 'timeout_s' must be a number")
    assert lines[3] == (f"{path}:25: error: providers.mail: option 'idempotency_keys' must be "
                        "true or false")
    assert lines[4].startswith(f"{path}:28: warning: provider 'chat' has no probe")
    assert lines[5].endswith("4 error(s), 1 warning(s)")


def test_invalid_toml_is_an_error_at_its_line() -> None:
    code, lines = check(CONFIGS / "not_toml.toml")
    assert code == 1
    assert lines[0].startswith(f"{CONFIGS / 'not_toml.toml'}:3: error: not valid TOML")


def test_a_service_table_serve_would_refuse_is_an_error() -> None:
    code, lines = check(CONFIGS / "bad_service.toml")
    assert code == 1
    assert lines[0] == (f"{CONFIGS / 'bad_service.toml'}:1: error: [service] token: secrets "
                        "never go in the file; name the variable that holds it with token_env")


def test_an_unreadable_file_exits_2(tmp_path: Path) -> None:
    code, lines = check(tmp_path / "missing.toml")
    assert code == 2
    assert lines[0].startswith("cannot check: ") and "missing.toml" in lines[0]


# --- --live ------------------------------------------------------------------------------------


@pytest.fixture
def charges() -> Iterator[tuple[str, list[str]]]:
    """A loopback JSON API listing one charge of op-1; yields its URL and the paths asked."""
    asked: list[str] = []

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            asked.append(self.path)
            body = json.dumps({"data": [{"id": "ch_live_1", "metadata": {
                "operation_id": "op-1"}}]}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05},
                              daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", asked
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


def live_setup(tmp_path: Path, base_url: str, provider: str = "payments",
               carries: frozenset[Carried] = frozenset({Carried.OPERATION_ID})
               ) -> tuple[Path, str]:
    """A config whose payments probe reads `base_url`, and a store holding op-1's intent (a
    charge tagged with its operation id, which the probe finds effects by)."""
    config = tmp_path / "reconciler.toml"
    config.write_text((CONFIGS / "valid.toml").read_text(encoding="utf-8").replace(
        "http://127.0.0.1:9/pay", base_url), encoding="utf-8")
    url = f"sqlite:///{tmp_path / 'store.db'}"
    store = open_store(url)
    store.record_intent(Intent("op-1", H0, K0, provider, "charge", Effect.NON_IDEMPOTENT,
                               datetime.now(UTC), carries=carries))
    store.engine.dispose()
    return config, url


def evidence_rows(url: str) -> int:
    store = open_store(url)
    try:
        with store.engine.connect() as conn:
            return int(conn.execute(select(func.count()).select_from(EvidenceRow)).scalar() or 0)
    finally:
        store.engine.dispose()


def test_live_runs_each_probe_once_shows_what_it_read_and_records_nothing(
        tmp_path: Path, charges: tuple[str, list[str]]) -> None:
    base_url, asked = charges
    config, url = live_setup(tmp_path, base_url)
    code, lines = check(config, "--live", "--operation-id", "op-1", "--db", url,
                        env={"CHECK_CONFIG_PAYMENTS_KEY": "k"})
    assert code == 0, lines
    assert asked == ["/v1/charges"]
    assert lines[-2].split() == ["probe", "authority", "matches", "error"]
    assert lines[-1].split() == ["payments.lookup", "authoritative", "ch_live_1", "-"]
    assert evidence_rows(url) == 0


def test_live_with_a_probe_that_cannot_read_exits_1(tmp_path: Path) -> None:
    config, url = live_setup(tmp_path, "http://127.0.0.1:9")  # discard port: refused
    code, lines = check(config, "--live", "--operation-id", "op-1", "--db", url,
                        env={"CHECK_CONFIG_PAYMENTS_KEY": "k"})
    assert code == 1
    assert lines[-1].split()[:2] == ["payments.lookup", "unavailable"]
    assert evidence_rows(url) == 0


def test_live_for_an_unknown_operation_exits_2(tmp_path: Path) -> None:
    config, url = live_setup(tmp_path, "http://127.0.0.1:9")
    code, lines = check(config, "--live", "--operation-id", "op-2", "--db", url)
    assert code == 2
    assert "no intent is recorded for operation 'op-2'" in lines[-1]


def test_live_never_creates_a_store(tmp_path: Path) -> None:
    code, lines = check(CONFIGS / "valid.toml", "--live", "--operation-id", "op-1", "--db",
                        f"sqlite:///{tmp_path / 'nowhere.db'}")
    assert code == 2 and "no store at" in lines[-1]
    assert not (tmp_path / "nowhere.db").exists()


# --- can the probes see the actions? (SPEC section 3) -----------------------------------------

def recorded(tmp_path: Path, *intents: Intent) -> str:
    url = f"sqlite:///{tmp_path / 'recorded.db'}"
    store = open_store(url)
    for intent in intents:
        store.record_intent(intent)
    store.engine.dispose()
    return url


def charge(op: str, provider: str = "payments", action: str = "charge", key: str | None = K0,
           carries: frozenset[Carried] | None = None) -> Intent:
    return Intent(op, H0, key, provider, action, Effect.NON_IDEMPOTENT, datetime.now(UTC),
                  carries=carries)


def test_a_side_effecting_action_no_probe_covers_is_an_error(tmp_path: Path) -> None:
    url = recorded(tmp_path, charge("op-1", carries=frozenset({Carried.OPERATION_ID})),
                   charge("op-2", action="refund"), charge("op-3", provider="fax"))
    code, lines = check(CONFIGS / "valid.toml", "--db", url,
                        env={"CHECK_CONFIG_PAYMENTS_KEY": "k"})
    assert code == 1
    where = str(CONFIGS / "valid.toml")
    assert f"{where}:4: error: action 'refund' of provider 'payments' (non_idempotent, " \
           "recorded in the store) is covered by no probe: no read proves it was not " \
           "applied, so a lost answer is never retried and goes to a human; name it in the " \
           "`actions` of a probe that reads where its effects appear" in lines
    assert any(line.startswith(f"{where}: error: action 'charge' of provider 'fax' ")
               for line in lines)
    assert lines[-1].endswith("2 error(s), 1 warning(s)")  # op-1's charge is seen


def test_a_probe_that_finds_effects_by_nothing_the_action_carries_is_an_error(
        tmp_path: Path) -> None:
    # A keyless charge that does not put the operation id in the metadata: the probe, which
    # matches metadata.operation_id, would read an empty list as a zero (the field trial).
    url = recorded(tmp_path, charge("op-1", key=None))
    code, lines = check(CONFIGS / "valid.toml", "--db", url,
                        env={"CHECK_CONFIG_PAYMENTS_KEY": "k"})
    assert code == 1
    assert f"{CONFIGS / 'valid.toml'}:8: error: probe 'payments.lookup' covers action " \
           "'charge' of provider 'payments' (non_idempotent, recorded in the store) but finds " \
           "effects by operation_id, and its requests carry nothing: its empty reads prove " \
           "nothing (attach the operation id where the provider keeps metadata, or send the " \
           "key, and say so in `carries`)" in lines


def test_the_agents_tools_are_checked_against_the_probes(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    module = f"sight_agent_{tmp_path.name.replace('-', '_')}"
    (tmp_path / f"{module}.py").write_text('''
from reconciler.core.domain import Effect
from reconciler.core.runs.messages import ToolSpec
from reconciler.runtime.agent import Agent
from reconciler.runtime.scripted import ScriptedModel
from reconciler.runtime.tools import Tool, ToolOutput

async def handler(call):
    return ToolOutput("ok")

def tool(name, effect, action):
    return Tool(ToolSpec(name, name, {"type": "object"}), effect, handler,
                provider="payments", action=action, uses_key=True)

agent = Agent(ScriptedModel([]), [tool("charge", Effect.NON_IDEMPOTENT, "charge"),
                                  tool("refund", Effect.IDEMPOTENT_WRITE, "refunds.create"),
                                  tool("look", Effect.READ_ONLY, None)])
''', encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    config = tmp_path / "reconciler.toml"
    config.write_text((CONFIGS / "valid.toml").read_text(encoding="utf-8").replace(
        "sweep_interval_s = 2", f'sweep_interval_s = 2\nagent = "{module}:agent"'))
    code, lines = check(config, env={"CHECK_CONFIG_PAYMENTS_KEY": "k"})
    assert code == 1
    errors = [line for line in lines if ": error: " in line]
    # charge: covered, but the probe finds by the operation id and the tool sends the key only.
    assert len(errors) == 2
    assert errors[0].split(": error: ")[1].startswith(
        "probe 'payments.lookup' covers action 'charge' of provider 'payments' "
        "(non_idempotent, agent tool 'charge') but finds effects by operation_id, and its "
        "requests carry idempotency_key")
    assert errors[1].split(": error: ")[1].startswith(
        "action 'refunds.create' of provider 'payments' (idempotent_write, agent tool "
        "'refund') is covered by no probe")


def test_an_mcp_proxy_tables_tools_are_checked_against_the_probes(tmp_path: Path) -> None:
    config = tmp_path / "proxy.toml"
    config.write_text((CONFIGS / "valid.toml").read_text(encoding="utf-8") + '''
[mcp_proxy]
provider = "payments"
[mcp_proxy.tools.send_money]
effect = "non_idempotent"
action = "transfer"
''')
    code, lines = check(config, env={"CHECK_CONFIG_PAYMENTS_KEY": "k"})
    assert code == 1
    assert any("error: action 'transfer' of provider 'payments' (non_idempotent, "
               "[mcp_proxy.tools.send_money]) is covered by no probe" in line for line in lines)


def test_a_probe_that_names_no_actions_is_warned_about(tmp_path: Path) -> None:
    config = tmp_path / "reconciler.toml"
    config.write_text((CONFIGS / "valid.toml").read_text(encoding="utf-8").replace(
        'actions = ["charge"]\n', ""))
    code, lines = check(config, env={"CHECK_CONFIG_PAYMENTS_KEY": "k"})
    assert code == 0
    assert f"{config}:8: warning: probe 'payments.lookup' names no `actions`: it covers " \
           "none, and its empty reads prove nothing (SPEC section 3)" in lines


def test_every_mistake_of_an_mcp_proxy_table_is_reported_at_its_table(tmp_path: Path) -> None:
    """As `reconciler mcp-proxy` would refuse them: each option is checked, not only the tools'
    coverage (reconciler/mcpproxy/options.py)."""
    config = tmp_path / "proxy.toml"
    config.write_text('''[mcp_proxy]
provider = "chat"
call_timeout_s = "soon"
colour = 3
[mcp_proxy.tools.send_message]
effect = "bogus"
sends_keys = true
''')
    code, lines = check(config)
    assert code == 1
    assert [line for line in lines if ": error: " in line] == [
        f"{config}:1: error: [mcp_proxy]: option 'call_timeout_s' must be a number",
        f"{config}:1: error: [mcp_proxy]: unknown option(s): colour",
        f"{config}:5: error: [mcp_proxy.tools.send_message]: option 'effect' must be one of: "
        "read_only, idempotent_write, non_idempotent",
        f"{config}:5: error: [mcp_proxy.tools.send_message]: unknown option(s): sends_keys"]


def test_the_mcp_proxy_refuses_the_table_check_config_refuses(tmp_path: Path) -> None:
    config = tmp_path / "proxy.toml"
    config.write_text('[mcp_proxy]\nprovider = "chat"\n[mcp_proxy.tools.send]\n'
                      'sends_key = "yes"\n')
    code, lines = check(config)
    result = runner.invoke(app, ["mcp-proxy", "--config", str(config), "--", "true"])
    mistake = "[mcp_proxy.tools.send]: option 'sends_key' must be true or false"
    assert (code, result.exit_code) == (1, EXIT_BAD_INPUT)
    assert f"{config}:3: error: {mistake}" in lines
    assert f"error: {config}: {mistake}" in result.output


PROXY_FILES = [(where, toml) for where, toml in shipped_configurations()
               if "[mcp_proxy]" in toml]


@pytest.mark.parametrize(("where", "toml"), PROXY_FILES, ids=[w for w, _ in PROXY_FILES])
def test_every_mcp_proxy_file_the_docs_ship_is_one_the_proxy_reads(
        where: str, toml: str, tmp_path: Path) -> None:
    config = tmp_path / "proxy.toml"
    config.write_text(toml, encoding="utf-8")
    settings, _ = load_proxy_settings(config, None)
    assert settings.provider, where
