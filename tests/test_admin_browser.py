"""The support admin in a real headless Chromium (Debian's /usr/bin/chromium driven by Playwright):
log in as support, open the dead letters, click Retry, see the success message and the delivery.

The browser is installed by scripts/browser.sh; if it cannot start, this test fails, never skips.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from playwright.sync_api import Browser, expect, sync_playwright

from notifications.models import DeadLetterReason, Notification, Resolution, Status

from .factories import make_api_client
from .fakes import LocalSmtpServer, smtp_server_fixture  # noqa: F401  (fixture)
from .helpers import ROOT, wait_until
from .test_admin import make_dead_letter, support_group

# Playwright's sync API runs an asyncio loop in this thread; the ORM calls the test makes between
# browser steps are still plain synchronous code.
os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

CHROMIUM = "/usr/bin/chromium"
SCREENSHOT = ROOT / "docs" / "admin-dlq.png"


@pytest.fixture
def browser() -> Iterator[Browser]:
    assert Path(CHROMIUM).exists(), f"{CHROMIUM} is missing: scripts/browser.sh installs Debian's chromium"
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=CHROMIUM, headless=True, args=["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"]
        )
        yield browser
        browser.close()


def test_support_logs_in_opens_the_dlq_clicks_retry_and_the_notification_is_delivered(
    browser: Browser, live_server: Any, worker: Any, smtp_server: LocalSmtpServer, tmp_path: Path
) -> None:
    user = get_user_model().objects.create_user("sam", password="support-pass-1", is_staff=True)
    user.groups.add(support_group())
    api_client, _ = make_api_client("shop")
    make_dead_letter(
        api_client,
        channel="sms",
        reason=DeadLetterReason.RETRIES_EXHAUSTED,
        last_error="503 Service Unavailable (Twilio)",
        attempts=5,
    )
    dead_letter = make_dead_letter(api_client, last_error="550 5.1.1 mailbox unavailable")
    Notification.objects.filter(pk=dead_letter.notification_id).update(address="ann@example.com")

    page = browser.new_page(viewport={"width": 1900, "height": 600})
    page.goto(f"{live_server.url}/admin/login/?next=/admin/notifications/deadletter/")
    page.fill("#id_username", "sam")
    page.fill("#id_password", "support-pass-1")
    page.click("input[type=submit]")
    expect(page.locator("#result_list")).to_be_visible()
    row = page.locator("#result_list tbody tr", has_text="550 5.1.1 mailbox unavailable")
    expect(row.locator("button.retry-button")).to_be_visible()

    row.locator("button.retry-button").click()

    expect(page.locator("ul.messagelist li.success")).to_have_text("1 retried, 0 skipped")
    # The README's picture: the dead letters right after a retry, with its message. Refreshed in
    # docs/ only when asked, so a test run leaves the checkout clean.
    screenshot = SCREENSHOT if os.environ.get("UPDATE_SCREENSHOTS") else tmp_path / SCREENSHOT.name
    page.screenshot(path=str(screenshot), full_page=True)
    assert screenshot.read_bytes().startswith(b"\x89PNG") and screenshot.stat().st_size > 10_000

    wait_until(
        lambda: Notification.objects.filter(pk=dead_letter.notification_id, status=Status.DELIVERED).exists(),
        timeout=20,
        message="delivered after the click",
    )
    assert [mail.rcpt_tos for mail in smtp_server.received] == [["ann@example.com"]]
    dead_letter.refresh_from_db()
    assert (dead_letter.resolution, dead_letter.resolved_by) == (Resolution.RETRIED, user)
    # The row now says who retried it and the new outcome, and offers no second Retry.
    page.reload()
    row = page.locator("#result_list tbody tr", has_text="550 5.1.1 mailbox unavailable")
    expect(row).to_contain_text("Retried by sam")
    expect(row).to_contain_text("delivered")
    expect(row.locator("button.retry-button")).to_have_count(0)
