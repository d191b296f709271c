"""<ntf-inbox> in a real headless Chromium (Debian's, driven by Playwright) on the demo page of the
embedded default as `make run` serves it (runplatform: uvicorn, in-process worker, SQLite): a
notification accepted through the API appears without a reload within a second, and marking it
read in one tab updates the badge in another; all under the Content-Security-Policy.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests
from playwright.sync_api import Browser, BrowserContext, ConsoleMessage, Page, expect

from .live_servers import embedded_env, embedded_platform, manage
from .test_admin_browser import RECORD_CSP_VIOLATIONS, browser_fixture  # noqa: F401  (fixture)

pytestmark = [pytest.mark.browser]


def watch(page: Page, problems: list[str]) -> None:
    page.add_init_script(RECORD_CSP_VIOLATIONS)

    def on_console(message: ConsoleMessage) -> None:
        if message.type == "error":
            problems.append(f"console error: {message.text}")

    page.on("console", on_console)
    page.on("pageerror", lambda error: problems.append(f"page error: {error}"))


@pytest.fixture
def demo(tmp_path: Path) -> Iterator[tuple[str, str]]:
    """The embedded platform with the demo page on; its address and the demo client's token."""
    with embedded_platform(tmp_path, INBOX_DEMO="true") as (server, _):
        printed = manage(embedded_env(tmp_path), "bootstrap_demo")
        yield server.base_url, next(word for word in printed.split() if word.startswith("ntf_live_"))


@pytest.fixture
def context(browser: Browser, demo: tuple[str, str]) -> Iterator[BrowserContext]:  # noqa: F811
    """The test's browser pages, closed before the demo server stops: a server waits for the live
    streams its pages hold open (20 s a test) before it exits."""
    context = browser.new_context(viewport={"width": 1200, "height": 800})
    yield context
    context.close()


def test_a_notification_appears_within_a_second_and_a_read_in_one_tab_updates_the_other(
    context: BrowserContext,
    demo: tuple[str, str],
    tmp_path: Path,
) -> None:
    base_url, client_token = demo
    problems: list[str] = []
    first, second = context.new_page(), context.new_page()
    for page in (first, second):
        watch(page, problems)
        page.goto(f"{base_url}/inbox/demo/?user=ann")
        expect(page.locator("ntf-inbox .state")).to_have_text("live", timeout=10_000)
        expect(page.locator("ntf-inbox .badge")).to_be_hidden()

    started = time.monotonic()
    accepted = requests.post(
        f"{base_url}/api/v1/notifications",
        json={"user_id": "ann", "channel": "in_app", "subject": "Your order shipped", "message": "It is on its way"},
        headers={"Authorization": f"Bearer {client_token}"},
        timeout=10,
    )
    assert accepted.status_code == 202, accepted.text
    expect(first.locator("ntf-inbox .badge")).to_have_text("1", timeout=1000)
    appeared = time.monotonic() - started
    expect(second.locator("ntf-inbox .badge")).to_have_text("1", timeout=1000)

    first.locator("ntf-inbox .bell").click()
    row = first.locator("ntf-inbox li.unread", has_text="Your order shipped")
    expect(row).to_be_visible()
    row.locator("button.read-toggle").click()

    expect(first.locator("ntf-inbox .badge")).to_be_hidden()
    expect(second.locator("ntf-inbox .badge")).to_be_hidden(timeout=2000)
    second.locator("ntf-inbox .bell").click()
    expect(second.locator("ntf-inbox li.read", has_text="Your order shipped")).to_be_visible()
    first.screenshot(path=str(tmp_path / "inbox-demo.png"))
    for page in (first, second):
        problems.extend(page.evaluate("window.__cspViolations"))
    assert appeared < 1.0, f"the item appeared after {appeared:.2f}s"
    assert problems == []


def test_the_widget_reopens_its_stream_with_a_ticket_and_its_last_event_id_after_its_token_is_renewed(
    context: BrowserContext,
    demo: tuple[str, str],
    tmp_path: Path,
) -> None:
    base_url, client_token = demo
    page = context.new_page()
    problems: list[str] = []
    watch(page, problems)
    streams: list[str] = []
    page.on("request", lambda request: streams.append(request.url) if "/api/v1/inbox/stream?" in request.url else None)
    page.goto(f"{base_url}/inbox/demo/?user=ann")
    expect(page.locator("ntf-inbox .state")).to_have_text("live", timeout=10_000)

    def accept(subject: str) -> None:
        answer = requests.post(
            f"{base_url}/api/v1/notifications",
            json={"user_id": "ann", "channel": "in_app", "subject": subject, "message": "m"},
            headers={"Authorization": f"Bearer {client_token}"},
            timeout=10,
        )
        assert answer.status_code == 202, answer.text

    accept("first")
    expect(page.locator("ntf-inbox .badge")).to_have_text("1", timeout=5000)
    with sqlite3.connect(tmp_path / "db.sqlite3") as database:
        (last_seen,) = database.execute("SELECT max(id) FROM notifications_inboxevent WHERE user_id = 'ann'").fetchone()
    revoked = requests.delete(
        f"{base_url}/api/v1/inbox/tokens",
        params={"user_id": "ann"},
        headers={"Authorization": f"Bearer {client_token}"},
        timeout=10,
    )
    assert revoked.status_code == 204
    accept("while it renews its token")

    expect(page.locator("ntf-inbox .badge")).to_have_text("2", timeout=10_000)
    expect(page.locator("ntf-inbox .state")).to_have_text("live")
    assert len(streams) >= 2, streams
    assert all("ticket=" in url and "token=" not in url for url in streams), streams
    assert f"last_event_id={last_seen}" in streams[1], (last_seen, streams)
    problems.extend(page.evaluate("window.__cspViolations"))
    assert [problem for problem in problems if "401" not in problem] == []
