"""The sandbox's Jira Cloud (reconciler/sandbox/jira.py) as the recipes and Jira's clients read
it: the issue property that binds a match to its request, the JQL it runs and the JQL it
refuses in Jira's words, Jira's login check, and the read faults in Jira's shapes."""

from __future__ import annotations

import base64
import tomllib
from pathlib import Path
from typing import Any

import httpx
import pytest

from probes import sight
from probes.base import ProbeTarget
from probes.config import parse_config
from probes.recipes import recipe_factory
from probes.recipes.jira import LABEL, PROPERTY
from probes.registry import default_registry
from reconciler.core.domain import Authority, Carried, Match, Observation
from reconciler.core.hashing import request_hash
from reconciler.sandbox import RunningSandbox
from reconciler.sandbox.jira import account_id
from reconciler.sandbox.jql import JqlError, parse
from reconciler.testing.patience import PATIENCE_S

EMAIL, TOKEN = "agent@example.test", "sandbox-api-token"
LOGIN = {"Authorization": "Basic " + base64.b64encode(f"{EMAIL}:{TOKEN}".encode()).decode()}
OP = "op-7"
HASH = request_hash({"operation_id": OP})


@pytest.fixture
def jira(sandbox: RunningSandbox) -> httpx.Client:
    """Jira's REST root on the kit's sandbox, emptied, logged in as EMAIL."""
    sandbox.state.reset()
    return httpx.Client(base_url=sandbox.url + "/jira/rest/api/3", headers=LOGIN,
                        timeout=PATIENCE_S, trust_env=False)


def create(jira: httpx.Client, *labels: str, **extra: Any) -> dict[str, Any]:
    answer = jira.post("/issue", json={"fields": {
        "project": {"key": "OPS"}, "issuetype": {"name": "Task"}, "summary": "Disk full",
        "labels": list(labels)}, **extra})
    assert answer.status_code == 201, answer.text
    created: dict[str, Any] = answer.json()
    return created


def observe(sandbox: RunningSandbox, recipe: str, **correlation: str) -> Observation:
    probe = recipe_factory(recipe)(recipe, {
        "base_url": sandbox.url + "/jira", "tries": 1, "least_lag_s": 0,
        "account": account_id(EMAIL)}, {"JIRA_EMAIL": EMAIL, "JIRA_API_TOKEN": TOKEN})
    seen = probe.probe(ProbeTarget(OP, None, "jira", "issue.create", HASH,
                                   {"project": "OPS", **correlation}))
    assert isinstance(seen, Observation)
    return seen


def test_the_request_hash_in_the_issue_property_binds_the_match(
        jira: httpx.Client, sandbox: RunningSandbox) -> None:
    made = create(jira, LABEL.format(operation_id=OP), properties=[
        {"key": PROPERTY, "value": {"operation_id": OP, "request_hash": HASH}}])

    assert observe(sandbox, "jira.search").matches == (Match(made["key"], HASH),)
    assert observe(sandbox, "jira.issue", issue_key=made["key"]).matches == (
        Match(made["key"], HASH),)


def test_an_issue_answers_only_the_fields_and_properties_asked_for(jira: httpx.Client) -> None:
    made = create(jira, "a", properties=[{"key": PROPERTY, "value": {"operation_id": OP}},
                                         {"key": "other", "value": 1}])
    issue = jira.get(f"/issue/{made['id']}", params={"fields": "labels",
                                                      "properties": PROPERTY}).json()
    assert (issue["key"], issue["fields"], issue["properties"]) == (
        made["key"], {"labels": ["a"]}, {PROPERTY: {"operation_id": OP}})
    assert made["self"].endswith(f"/jira/rest/api/3/issue/{made['id']}")


def test_jql_finds_by_label_project_key_and_issue_property(jira: httpx.Client) -> None:
    first = create(jira, "x", properties=[{"key": PROPERTY, "value": {"operation_id": OP}}])
    create(jira, "y")
    for query in ('labels = x', 'project = "OPS" AND labels = "x"', f'key = {first["key"]}',
                  f'issue.property[{PROPERTY}].operation_id = "{OP}"'):
        found = jira.get("/search/jql", params={"jql": query}).json()
        assert [i["id"] for i in found["issues"]] == [first["id"]], query
        assert found["isLast"] is True


@pytest.mark.parametrize(("jql", "says"), [
    ("", "Unbounded JQL queries are not allowed"),
    ("summary ~ disk", "the operator '~' is not supported"),
    ("assignee = me", "Field 'assignee' does not exist"),
    ("labels = x OR labels = y", "Expecting either 'OR' or 'AND'"),
    ("labels = x ORDER BY priority", "orders only by created or key"),
    ("labels = (x", "Expecting a value"),
    ("labels =", "Expecting operator but got the end"),
])
def test_jql_the_sandbox_cannot_run_is_a_400_in_jiras_shape(jql: str, says: str) -> None:
    with pytest.raises(JqlError, match=says.replace("(", r"\(")):
        parse(jql)


def test_a_bad_query_reaches_the_client_as_jiras_400(jira: httpx.Client) -> None:
    answer = jira.get("/search/jql", params={"jql": "assignee = me"})
    assert answer.status_code == 400
    assert answer.json() == {"errorMessages": [
        "Field 'assignee' does not exist or you do not have permission to view it."],
        "errors": {}}


@pytest.mark.parametrize("authorization", [None, "Bearer x", "Basic !!", "Basic " + base64.
                                           b64encode(b"no-address:token").decode()])
def test_without_a_login_jira_answers_its_plain_401(sandbox: RunningSandbox,
                                                    authorization: str | None) -> None:
    headers = {"Authorization": authorization} if authorization else {}
    answer = httpx.get(sandbox.url + "/jira/rest/api/3/myself", headers=headers,
                       trust_env=False)
    assert (answer.status_code, answer.text) == (
        401, "Client must be authenticated to access this resource.")


def test_a_create_without_its_fields_is_jiras_400_by_field(jira: httpx.Client) -> None:
    answer = jira.post("/issue", json={"fields": {"labels": ["has space"]}})
    assert answer.status_code == 400
    assert set(answer.json()["errors"]) == {"project", "issuetype", "summary", "labels"}


@pytest.mark.parametrize(("config", "status"), [({"read_unavailable": True}, 503),
                                                ({"rate_limited_s": 30}, 429)])
def test_read_faults_answer_in_jiras_shape(jira: httpx.Client, sandbox: RunningSandbox,
                                           config: dict[str, Any], status: int) -> None:
    sandbox.state.configure(**config)
    answer = jira.get("/search/jql", params={"jql": "labels = x"})
    assert answer.status_code == status and set(answer.json()) == {"errorMessages", "errors"}
    if status == 429:
        assert answer.headers["Retry-After"] == "30"
    seen = observe(sandbox, "jira.search")
    assert seen.authority is Authority.UNAVAILABLE


@pytest.mark.parametrize(("recipe", "finds_by"), [
    ("jira.search", {Carried.OPERATION_ID}),      # the label in the JQL and on the issue
    ("jira.issue", {Carried.PROVIDER_REF})])      # GET /issue/{the key the answer gave}
def test_what_the_jira_recipes_find_effects_by(recipe: str, finds_by: set[Carried]) -> None:
    probe = recipe_factory(recipe)(recipe, {"base_url": "https://acme.atlassian.net",
                                            "account": "712020:x"}, {})
    assert sight.finds_by(sight.needs(probe) or frozenset()) == finds_by


def test_a_resource_jira_does_not_have_is_its_null_for_uri_404(jira: httpx.Client) -> None:
    answer = jira.get("/nosuchresource")
    assert answer.status_code == 404
    assert answer.json() == {"message": f"null for uri: {answer.request.url}",
                             "status-code": 404}


def test_the_configuration_docs_providers_jira_md_shows_loads() -> None:
    doc = (Path(__file__).parent.parent / "docs" / "providers" / "jira.md").read_text()
    example = doc.split("```toml\n", 1)[1].split("```", 1)[0]
    [jira] = parse_config(tomllib.loads(example), env={}, registry=default_registry()).values()
    assert jira.contract.visibility_lag_s == 300.0 and not jira.contract.idempotency_keys
    assert [p.name for p in jira.probes] == ["jira.issue", "jira.search"]
