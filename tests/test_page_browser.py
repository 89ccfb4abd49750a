"""The status page in a real browser: Debian's headless Chromium, driven by Selenium through
Debian's chromedriver, against a real ``serve --http`` process on a loopback port.

Checked: the sign-in form refuses a wrong token and accepts the right one; the page loads with
no console error and no Content-Security-Policy violation (either would be logged as a
SEVERE console entry); it shows every routine; a fire made meanwhile appears without a reload.

With ``TRIO_ROUTINES_SCREENSHOT=<path>`` the test also saves a screenshot of the page there
(that is how ``docs/status-page.png`` is made). Without Chromium the test is skipped locally
and fails under ``CI``, which installs it.
"""

from __future__ import annotations

import json
import os
import re
import urllib.request
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from procs import Env, stop, wait_for

from trio_routines.records import Outcome
from trio_routines.stores.directory import DirectoryStore

pytestmark = pytest.mark.slow

CHROMIUM = "/usr/bin/chromium"
DRIVER = "/usr/bin/chromedriver"
TOKEN = "browser-token-93c1"


def _browser() -> Any:
    missing = [path for path in (CHROMIUM, DRIVER) if not os.access(path, os.X_OK)]
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
    except ImportError:
        missing.append("the selenium package")
    if missing:
        reason = f"the browser test needs {', '.join(missing)} (apt-get install chromium-driver)"
        if os.environ.get("CI"):
            pytest.fail(reason, pytrace=False)
        pytest.skip(reason)
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu"):
        options.add_argument(flag)
    options.add_argument("--window-size=1280,900")
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    return webdriver.Chrome(options=options, service=Service(executable_path=DRIVER))


def seed(env: Env) -> None:
    """Example history: a daily digest, a five-minute check with every outcome and a gap."""
    env.routine("digest", "Post the daily digest.", cron="0 9 * * *", tz="Europe/Berlin")
    env.routine("inbox-check", "Look at the inbox.", cron="*/5 * * * *")
    env.routine("standup", "Write the stand-up notes.")
    store = DirectoryStore(env.state)
    now = datetime.now(UTC)
    berlin = now.astimezone(ZoneInfo("Europe/Berlin")).replace(
        hour=9, minute=0, second=0, microsecond=0
    )
    for days in range(12, 0, -1):
        slot = (berlin - timedelta(days=days)).astimezone(UTC)
        store.claim_sync("digest", slot, slot + timedelta(milliseconds=40))
        outcome = Outcome.FAILED if days == 4 else Outcome.COMPLETED
        error = "exit status 2: API key expired" if days == 4 else None
        store.settle_sync("digest", slot, outcome, 2100 + days * 10, error=error)
    five = now.replace(minute=now.minute - now.minute % 5, second=0, microsecond=0)
    cycle = [Outcome.COMPLETED] * 5 + [Outcome.SKIPPED, Outcome.COMPLETED, Outcome.FAILED]
    for step in range(40, 1, -1):
        if step in (20, 21, 22):
            continue  # downtime: three missed slots
        slot = five - timedelta(minutes=5 * step)
        store.claim_sync("inbox-check", slot, slot + timedelta(milliseconds=15 + step))
        outcome = Outcome.INTERRUPTED if step == 23 else cycle[step % len(cycle)]
        store.settle_sync("inbox-check", slot, outcome, 800 + step * 7)


def _call(port: int, method: str, path: str, body: dict[str, object]) -> dict[str, object]:
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}{path}",
        data=json.dumps(body).encode(),
        method=method,
        headers={"Content-Type": "application/json", "Authorization": f"Bearer {TOKEN}"},
    )
    with urllib.request.urlopen(request, timeout=15) as answer:
        result: dict[str, object] = json.loads(answer.read())
        return result


def _severe(driver: Any) -> list[str]:
    entries = driver.get_log("browser")
    return [entry["message"] for entry in entries if entry["level"] == "SEVERE"]


def test_the_status_page_in_a_real_browser(env: Env, monkeypatch: pytest.MonkeyPatch) -> None:
    driver = _browser()
    seed(env)
    with_token = {**env.environ(), "TRIO_ROUTINES_TOKEN": TOKEN}
    monkeypatch.setattr(env, "environ", lambda: with_token)
    proc = env.start("serve", "--agent", "echo", "--http", "127.0.0.1:0", "--no-wakeups")
    try:
        found = wait_for(
            lambda: re.search(r"HTTP surface on http://127\.0\.0\.1:(\d+)", env.log()),
            30,
            "the HTTP surface to start",
        )
        port = int(found.group(1))
        _run(driver, port)
    finally:
        driver.quit()
        stop(proc)


def _run(d: Any, port: int) -> None:
    from selenium.common.exceptions import StaleElementReferenceException
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    # The page's script redraws it every second: an element found may be replaced before
    # it is read, and is looked up again then.
    wait = WebDriverWait(d, 30, ignored_exceptions=(StaleElementReferenceException,))
    d.get(f"http://127.0.0.1:{port}/")
    field = d.find_element(By.ID, "token")
    field.send_keys("not the token")
    field.submit()
    wait.until(lambda drv: "wrong token" in drv.page_source)
    assert not d.find_elements(By.CSS_SELECTOR, "article.routine")

    field = d.find_element(By.ID, "token")
    field.send_keys(TOKEN)
    field.submit()
    wait.until(lambda drv: drv.find_elements(By.CSS_SELECTOR, "article.routine"))
    # The sign-in page came with 401s, which a browser logs; from here on nothing may be logged.
    _severe(d)
    d.refresh()
    wait.until(lambda drv: drv.find_elements(By.CSS_SELECTOR, "article.routine"))
    names = wait.until(
        lambda drv: [e.text for e in drv.find_elements(By.CSS_SELECTOR, "article.routine h3")]
    )
    assert names == ["digest", "inbox-check", "standup"]
    cookies = d.get_cookies()
    assert [c["name"] for c in cookies] == ["trio_routines_page"]
    assert cookies[0]["httpOnly"] is True
    assert cookies[0]["sameSite"] == "Strict"
    assert TOKEN not in cookies[0]["value"]
    assert TOKEN not in d.current_url
    kinds = wait.until(
        lambda drv: {
            m.get_attribute("class").split()[-1]
            for m in drv.find_elements(By.CSS_SELECTOR, "svg.timeline g.mark")
        }
    )
    assert {"o-completed", "o-failed", "o-skipped", "o-interrupted", "o-missed"} <= kinds

    # A fire made elsewhere shows up without a reload: the marker set now survives it.
    d.execute_script("window.__notReloaded = true;")
    strip = "article.routine:nth-of-type(3) .strip"
    assert wait.until(lambda drv: drv.find_element(By.CSS_SELECTOR, strip).text).count(
        "never fired"
    )
    slot = datetime.now(UTC) - timedelta(seconds=2)
    answer = _call(
        port, "POST", "/fire", {"name": "standup", "slot": slot.isoformat(), "wait": True}
    )
    assert answer["outcome"] == "completed"
    wait.until(lambda drv: "✓" in drv.find_element(By.CSS_SELECTOR, strip).text)
    assert d.execute_script("return window.__notReloaded === true;")
    assert int(d.find_element(By.TAG_NAME, "body").get_attribute("data-refreshes")) >= 1

    assert _severe(d) == []  # no script error, no CSP violation, no failed load

    shot = os.environ.get("TRIO_ROUTINES_SCREENSHOT")
    if shot:
        d.save_screenshot(shot)
        narrow = Path(shot).with_name(Path(shot).stem + "-narrow.png")
        d.set_window_size(390, 900)
        d.save_screenshot(str(narrow))
