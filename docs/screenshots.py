"""Screenshots of every console page, for the docs: `python docs/screenshots.py OUTDIR`.

Serves a sidecar over a throwaway store with something to show (an escalated operation, a run
waiting for approval; tests/console_harness.py), signs in with headless Chromium (Debian's
chromium + chromium-driver) and writes one PNG per page into OUTDIR.
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from selenium.webdriver.common.by import By

from reconciler.store.sealing import KEY_ENV, new_key

from console_harness import browser, console_sidecar
from sidecar_client import TOKEN

PAGES = {
    "login": "/ui/login",
    "queue": "/ui/queue",
    "operations": "/ui/operations",
    "operation": "/ui/operation?id=late",
    "runs": "/ui/runs",
    "run": "/ui/run?id=r1",
}


def write_screenshots(out: Path) -> list[Path]:
    """One PNG per console page (and the decision's confirmation page) in `out`."""
    out.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault(KEY_ENV, new_key())  # the throwaway runs are sealed under it
    written = []
    with tempfile.TemporaryDirectory() as scratch, console_sidecar(Path(scratch)) as console, \
            browser() as driver:
        driver.get(console.url + PAGES["login"])
        written.append(_shot(driver, out, "login"))
        driver.find_element(By.ID, "credential").send_keys(TOKEN)
        driver.find_element(By.ID, "sign-in").click()
        for name, path in PAGES.items():
            if name != "login":
                driver.get(console.url + path)
                written.append(_shot(driver, out, name))
        driver.get(console.url + PAGES["operation"])
        driver.find_element(By.ID, "action-resolve_not_applied").click()
        driver.find_element(By.ID, "note").send_keys("no charge in the provider's dashboard")
        driver.find_element(By.ID, "review").click()
        written.append(_shot(driver, out, "confirm"))
    return written


def _shot(driver: object, out: Path, name: str) -> Path:
    path = out / f"console-{name}.png"
    driver.save_screenshot(str(path))  # type: ignore[attr-defined]
    return path


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python docs/screenshots.py OUTDIR")
    for path in write_screenshots(Path(sys.argv[1])):
        print(path)
