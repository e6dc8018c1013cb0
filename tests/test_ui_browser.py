"""The operator console in a real browser (headless Chromium under chromedriver): sign in,
find the escalated operation in the queue, read its timeline, resolve it; find the run that
waits for approval, approve the re-send; approve a first send, reject another; the store
records what was decided, and by whom, and the provider counts what was sent."""

from __future__ import annotations

from pathlib import Path

from selenium.common.exceptions import WebDriverException
from selenium.webdriver.chrome.webdriver import WebDriver
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webelement import WebElement
from selenium.webdriver.support import expected_conditions
from selenium.webdriver.support.wait import WebDriverWait

from reconciler.core.domain import Approval, Compensation, Resolution, Verdict
from reconciler.core.runs.events import EventKind
from reconciler.store.journal import SqlJournal

from console_harness import browser, console_sidecar
from sidecar_client import TOKEN

#: What chromedriver sometimes answers, instead of a stale element reference, about an element
#: of a page just left (SeleniumHQ/selenium#15401: `staleness_of` raises it).
DETACHED = "Node with given id does not belong to the document"


def submit(driver: WebDriver, button_id: str, by: str = By.ID) -> None:
    """Click a button or link and wait for the next page (a click returns before it loads)."""
    button = driver.find_element(by, button_id)
    button.click()
    WebDriverWait(driver, 30).until(lambda _: _left(button))


def _left(element: WebElement) -> bool:
    """The page holding `element` was replaced (`staleness_of`, and chromedriver's other
    answer for it)."""
    try:
        return bool(expected_conditions.staleness_of(element)(None))
    except WebDriverException as exc:
        if DETACHED in (exc.msg or ""):
            return True
        raise


def follow(driver: WebDriver, link_text: str) -> None:
    submit(driver, link_text, By.LINK_TEXT)


def sign_in(driver: WebDriver, url: str) -> None:
    driver.get(url + "/ui")
    assert "/ui/login" in driver.current_url
    driver.find_element(By.ID, "credential").send_keys(TOKEN)
    submit(driver, "sign-in")
    assert driver.current_url.endswith("/ui/queue")
    assert driver.find_element(By.ID, "operator").text == "admin"


def review(driver: WebDriver, action: str, note: str, **fields: str) -> str:
    """On a page's decide form: choose `action`, write `note` (and any other `fields`), review
    it; the confirmation page's "what happens next"."""
    driver.find_element(By.ID, f"action-{action}").click()
    for name, value in {**fields, "note": note}.items():
        driver.find_element(By.ID, name).send_keys(value)
    submit(driver, "review")
    return driver.find_element(By.ID, "what-next").text


def queue_rows(driver: WebDriver) -> list[str]:
    return [row.text for row in driver.find_elements(By.CSS_SELECTOR, "#queue tr.item")]


def test_an_operator_resolves_an_escalated_operation(tmp_path: Path) -> None:
    with console_sidecar(tmp_path) as console, browser() as driver:
        sign_in(driver, console.url)
        [late] = [row for row in queue_rows(driver) if "late" in row]
        assert "escalate_to_human" in late and "a human decides" in late
        follow(driver, "late")
        assert driver.find_element(By.ID, "verdict").text == "indeterminate"
        timeline = driver.find_element(By.CSS_SELECTOR, "#timeline svg")
        assert timeline.find_elements(By.CSS_SELECTOR, "circle.attempt")
        assert timeline.find_elements(By.CSS_SELECTOR, "line.deadline")
        what_next = review(driver, "resolve_applied", "charge ch_9 seen in the dashboard")
        assert "verified_applied" in what_next and "no retry will be granted" in what_next
        submit(driver, "confirm")
        assert "Recorded" in driver.find_element(By.ID, "flash").text
        assert driver.find_element(By.ID, "verdict").text == "verified_applied"
        assert driver.find_elements(By.CSS_SELECTOR, "#timeline circle.resolution")
        follow(driver, "Needs a human")
        assert not [row for row in queue_rows(driver) if "late" in row]
    [resolution] = console.store.facts("late").of(Resolution)
    assert (resolution.verdict, resolution.actor, resolution.note) == (
        Verdict.VERIFIED_APPLIED, "admin", "charge ch_9 seen in the dashboard")


def test_an_operator_approves_the_retry_a_run_waits_for(tmp_path: Path) -> None:
    with console_sidecar(tmp_path) as console, browser() as driver:
        sign_in(driver, console.url)
        [waiting] = [row for row in queue_rows(driver) if "r1" in row]
        assert "awaiting_approval" in waiting
        follow(driver, "r1")
        assert driver.find_element(By.ID, "state").text == "awaiting_approval"
        assert '"text": "hi"' in driver.find_element(By.ID, "arguments").text
        assert "sent again" in review(driver, "not_applied", "not in the channel")
        submit(driver, "confirm")
        assert driver.find_element(By.ID, "state").text == "completed"
    assert console.send.attempts == [1, 2]
    events = SqlJournal(console.store).events("r1")
    [decided] = [e for e in events if e.kind is EventKind.APPROVAL_DECIDED]
    assert (decided.data["decision"], decided.data["actor"], decided.data["note"]) == (
        "not_applied", "admin", "not in the channel")
    op = SqlJournal(console.store).load("r1").calls[decided.data["tool_call_id"]].operation_id
    assert op is not None
    [approval] = console.store.facts(op).of(Approval)
    assert (approval.actor, approval.note) == ("admin", "not in the channel")


def decide_run(driver: WebDriver, run_id: str, action: str, note: str) -> str:
    """From the queue to the run's page, `action` with `note`, reviewed and confirmed: the
    confirmation page's "what happens next"."""
    follow(driver, run_id)
    what_next = review(driver, action, note)
    submit(driver, "confirm")
    return what_next


def first_send_offers(driver: WebDriver) -> list[str]:
    """The decisions the run page offers, checked to be for a call never sent."""
    assert "before its first send" in driver.find_element(By.ID, "first-send").text
    return [radio.get_attribute("value") or "" for radio in
            driver.find_elements(By.CSS_SELECTOR, "#decide input[name=action]")]


def test_an_operator_approves_a_first_send_and_it_is_sent_once(tmp_path: Path) -> None:
    with console_sidecar(tmp_path, first_sends=("r2",)) as console, browser() as driver:
        sign_in(driver, console.url)
        [waiting] = [row for row in queue_rows(driver) if "r2" in row]
        assert "waiting for approval before its first send" in waiting
        follow(driver, "r2")
        assert first_send_offers(driver) == ["approve", "reject"]
        driver.back()
        what_next = decide_run(driver, "r2", "approve", "customer asked twice")
        assert "sent for the first time" in what_next and "again" not in what_next
        assert driver.find_element(By.ID, "state").text == "completed"
        follow(driver, "Needs a human")
        assert not [row for row in queue_rows(driver) if "r2" in row]
    assert console.refund.sent == ["ch_r2"]
    [decided] = [e for e in SqlJournal(console.store).events("r2")
                 if e.kind is EventKind.APPROVAL_DECIDED]
    assert (decided.data["decision"], decided.data["actor"], decided.data["note"]) == (
        "approve", "admin", "customer asked twice")


def test_an_operator_rejects_a_first_send_and_nothing_is_sent(tmp_path: Path) -> None:
    with console_sidecar(tmp_path, first_sends=("r3",)) as console, browser() as driver:
        sign_in(driver, console.url)
        what_next = decide_run(driver, "r3", "reject", "not this customer")
        assert "not run" in what_next
        assert driver.find_element(By.ID, "state").text == "completed"
        assert "error (rejected)" in driver.find_element(By.ID, "calls").text
    assert console.refund.sent == []
    [decided] = [e for e in SqlJournal(console.store).events("r3")
                 if e.kind is EventKind.APPROVAL_DECIDED]
    assert (decided.data["decision"], decided.data["actor"], decided.data["note"]) == (
        "reject", "admin", "not this customer")


def test_an_operator_marks_a_duplicate_compensated(tmp_path: Path) -> None:
    with console_sidecar(tmp_path, duplicates=("dup",)) as console, browser() as driver:
        sign_in(driver, console.url)
        [waiting] = [row for row in queue_rows(driver) if "dup" in row]
        assert "duplicate_effect" in waiting and "compensate the extra one" in waiting
        follow(driver, "dup")
        effects = driver.find_element(By.ID, "effects").text
        assert "dup_1 the worker received this one" in effects
        assert "dup_2" in effects and "dup_2 the worker received" not in effects
        offered = [radio.get_attribute("value") for radio in
                   driver.find_elements(By.CSS_SELECTOR, "#decide input[name=action]")]
        assert offered == ["compensate"]
        what_next = review(driver, "compensate", "refunded the second charge",
                           reference="re_dup_2")
        assert "stays duplicate_effect" in what_next and "leaves the queue" in what_next
        submit(driver, "confirm")
        assert "Recorded" in driver.find_element(By.ID, "flash").text
        assert driver.find_element(By.ID, "verdict").text == "duplicate_effect"
        assert driver.find_element(By.ID, "next-action").text == "compensated"
        assert "re_dup_2" in driver.find_element(By.ID, "evidence").text
        assert driver.find_elements(By.CSS_SELECTOR, "#timeline circle.compensation")
        assert not driver.find_elements(By.ID, "decide")
        follow(driver, "Needs a human")
        assert not [row for row in queue_rows(driver) if "dup" in row]
    [compensation] = console.store.facts("dup").of(Compensation)
    assert (compensation.actor, compensation.note, compensation.reference) == (
        "admin", "refunded the second charge", "re_dup_2")
