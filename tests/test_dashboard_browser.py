"""The dashboard in a real headless Chromium at 1280 px, on notifications a real worker delivered,
failed and made dead through a local SMTP server: the charts say the counts the test made, a dead
notification is two clicks from the index, its Retry delivers it, and no list scrolls sideways."""

from __future__ import annotations

import os
import re
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Browser, Page, expect

from notifications.models import Notification, Status

from .factories import accept_notification, make_api_client
from .fakes import LocalSmtpServer, override_notifications, smtp_server_fixture  # noqa: F401  (fixture)
from .helpers import ROOT, wait_until
from .test_admin_browser import NARROW, browser_fixture, support_page  # noqa: F401  (fixture)

os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"  # the ORM between browser steps (see test_admin_browser.py)

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

SCREENSHOT = ROOT / "docs" / "admin-dashboard.png"
SCROLLS_SIDEWAYS = "() => document.scrollingElement.scrollWidth > document.scrollingElement.clientWidth"


def bar_titles(page: Page, chart: str) -> list[str]:
    """What the chart's bars say in their titles (their tooltips and accessible names)."""
    return page.locator(f"{chart} a").evaluate_all("bars => bars.map(bar => bar.querySelector('title').textContent)")


def bar_counts(page: Page, chart: str) -> Counter[str]:
    """The counts the chart's bars say ("email 2026-12-05 07:00: 3 delivered"), summed by status."""
    counts: Counter[str] = Counter()
    for label in bar_titles(page, chart):
        count, status = re.search(r": (\d+) (\w+)$", label).groups()  # type: ignore[union-attr]
        counts[status] += int(count)
    return counts


def assert_no_sideways_scroll(page: Page, what: str) -> None:
    assert not page.evaluate(SCROLLS_SIDEWAYS), f"{what} scrolls sideways at 1280 px"


def test_a_support_agent_reads_the_dashboard_reaches_a_dead_notification_in_two_clicks_and_retries_it(
    browser: Browser, live_server: Any, worker: Any, smtp_server: LocalSmtpServer, tmp_path: Path
) -> None:
    client, _ = make_api_client("shop")
    smtp_server.refuse("gone@example.com")
    smtp_server.defer("busy@example.com")
    with override_notifications(RETRY_MAX_ATTEMPTS=1):
        made = [accept_notification(client, to=f"ann{i}@example.com", user_id=f"ann{i}") for i in range(3)]
        made += [accept_notification(client, to="gone@example.com", user_id=f"gone{i}") for i in range(2)]
        dead = accept_notification(client, to="busy@example.com", user_id="busy")
        wait_until(
            lambda: (
                Counter(Notification.objects.values_list("status", flat=True))
                == {Status.DELIVERED: 3, Status.FAILED: 2, Status.DEAD: 1}
            ),
            timeout=20,
            message="the worker delivered 3, failed 2 and made 1 dead",
        )
    assert len(made) == 5

    _, page = support_page(browser, live_server, viewport=NARROW)

    # The charts are drawn with the counts the worker made.
    email = 'figure[data-channel="email"] svg.chart-hours'
    expect(page.locator(email)).to_have_attribute("aria-label", "email, by hour: 3 delivered, 2 failed, 1 dead")
    assert bar_counts(page, email) == {"delivered": 3, "failed": 2, "dead": 1}
    assert bar_counts(page, "svg.chart-accounts") == {"delivered": 3, "failed": 2, "dead": 1}
    expect(page.locator("svg.chart-accounts")).to_have_attribute(
        "aria-label", "Delivery rate per provider account: email · (only account): 50.0% delivered of 6"
    )
    reasons = page.locator("svg.chart-reasons").get_attribute("aria-label")
    assert reasons == "Top failure reasons: permanent SMTP 550 (email): 2; transient SMTP 451 (email): 1"
    expect(page.locator("svg.chart-latency")).to_have_attribute(
        "aria-label", re.compile(r"^Accept to delivered: p95 ≤ .+ of 3 deliveries$")
    )
    assert_no_sideways_scroll(page, "the admin index")
    screenshot = SCREENSHOT if os.environ.get("UPDATE_SCREENSHOTS") else tmp_path / SCREENSHOT.name
    page.screenshot(path=str(screenshot), full_page=True)

    # One click: the dead bar, to the list of that hour's dead email; it fits.
    dead_bar = next(index for index, title in enumerate(bar_titles(page, email)) if title.endswith(" dead"))
    page.locator(f"{email} a").nth(dead_bar).click()
    rows = page.locator("#result_list tbody tr")
    expect(rows).to_have_count(1)
    assert_no_sideways_scroll(page, "the notifications list")
    # Two: the notification; its Retry, once the mailbox takes mail again.
    rows.first.locator("th a").click()
    assert str(dead.pk) in page.url
    smtp_server.defer("busy@example.com", until_further_notice=False)
    page.locator("form.object-tool-form button.retry-button").click()
    expect(page.locator("ul.messagelist li.success")).to_have_text("1 retried, 0 skipped")
    wait_until(
        lambda: Notification.objects.filter(pk=dead.pk, status=Status.DELIVERED).exists(),
        timeout=20,
        message="delivered after the retry",
    )
    assert [mail.rcpt_tos for mail in smtp_server.received if mail.rcpt_tos == ["busy@example.com"]] == [["busy@example.com"]]

    # The dashboard moved it from dead to delivered; the dead letters list fits too.
    page.goto(f"{live_server.url}/admin/")
    expect(page.locator(email)).to_have_attribute("aria-label", "email, by hour: 4 delivered, 2 failed, 0 dead")
    page.goto(f"{live_server.url}/admin/notifications/deadletter/")
    expect(page.locator("#result_list")).to_be_visible()
    assert_no_sideways_scroll(page, "the dead letters list")
    page.goto(f"{live_server.url}/admin/?window=7d")
    expect(page.locator(email)).to_have_attribute("aria-label", "email, by hour: 4 delivered, 2 failed, 0 dead")
    assert_no_sideways_scroll(page, "the admin index over 7 days")
