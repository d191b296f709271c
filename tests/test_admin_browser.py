"""The support admin in a real headless Chromium (Debian's /usr/bin/chromium driven by Playwright):
log in as support, open the dead letters, click Retry, see the success message and the delivery;
and every admin page and the Swagger UI of /api/docs/ working under the Content-Security-Policy.

The browser is installed by scripts/browser.sh; if it cannot start, this test fails, never skips.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.contrib.admin.models import LogEntry
from django.contrib.auth import get_user_model
from playwright.sync_api import Browser, ConsoleMessage, Page, Response, expect, sync_playwright

from notifications.models import ApiClient, DeadLetter, DeadLetterReason, Notification, Resolution, Status

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


@pytest.fixture(name="browser")
def browser_fixture() -> Iterator[Browser]:
    assert Path(CHROMIUM).exists(), f"{CHROMIUM} is missing: scripts/browser.sh installs Debian's chromium"
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=CHROMIUM, headless=True, args=["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"]
        )
        yield browser
        browser.close()


def support_page(browser: Browser, live_server: Any, *, viewport: dict[str, int], then: str = "/admin/") -> tuple[Any, Page]:
    """A support user, and a page of theirs logged in through the login form, then at ``then``."""
    user = get_user_model().objects.create_user("sam", password="support-pass-1", is_staff=True)
    user.groups.add(support_group())
    page = browser.new_page(viewport=viewport)
    page.goto(f"{live_server.url}/admin/login/?next={then}")
    page.fill("#id_username", "sam")
    page.fill("#id_password", "support-pass-1")
    page.click("input[type=submit]")
    return user, page


def test_support_logs_in_opens_the_dlq_clicks_retry_and_the_notification_is_delivered(
    browser: Browser, live_server: Any, worker: Any, smtp_server: LocalSmtpServer, tmp_path: Path
) -> None:
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

    user, page = support_page(
        browser, live_server, viewport={"width": 1900, "height": 600}, then="/admin/notifications/deadletter/"
    )
    expect(page.locator("#result_list")).to_be_visible()
    row = page.locator("#result_list tbody tr", has_text="550 5.1.1 mailbox unavailable")
    expect(row.locator("button.retry-button")).to_be_visible()

    row.locator("button.retry-button").click()

    expect(page.locator("ul.messagelist li.success")).to_have_text("1 retried, 0 skipped")
    # docs/operations.md's picture: the dead letters right after a retry, with its message. Refreshed in
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


# --- A support agent's path at 1280 px ---------------------------------------------------------

NARROW = {"width": 1280, "height": 800}
# Set to a folder to keep the two lists' screenshots (to look at them); a tmp folder otherwise.
SCREENSHOT_DIR = os.environ.get("ADMIN_SCREENSHOT_DIR", "")

NO_HORIZONTAL_SCROLL = """() => {
  const root = document.documentElement;
  const table = document.querySelector("#result_list");
  const holder = table && table.closest(".results");
  return {scroll: root.scrollWidth, client: root.clientWidth,
          table: table ? table.getBoundingClientRect().width : 0,
          holder: holder ? holder.clientWidth : 0};
}"""


def assert_fits(page: Any, what: str) -> None:
    sizes = page.evaluate(NO_HORIZONTAL_SCROLL)
    assert sizes["scroll"] <= sizes["client"], f"{what} scrolls sideways at 1280 px: {sizes}"
    assert 0 < sizes["table"] <= sizes["holder"] + 1, f"{what}: the results table is wider than its container: {sizes}"


def test_a_support_agent_at_1280_px_reaches_a_dead_notification_in_two_clicks_retries_it_and_it_is_delivered(
    browser: Browser, live_server: Any, worker: Any, smtp_server: LocalSmtpServer, tmp_path: Path
) -> None:
    api_client, _ = make_api_client("shop")
    # Long values everywhere a column could widen the lists.
    long_error = "503 Service Unavailable: the upstream relay at smtp-relay-eu-west-1.mail.example.com " * 3
    for index in range(3):
        make_dead_letter(
            api_client,
            channel="sms",
            reason=DeadLetterReason.RETRIES_EXHAUSTED,
            last_error=f"{index} {long_error}",
            attempts=5,
        )
    Notification.objects.update(
        user_id="customer-4e1b7a0c-2f7e-4c55-9d0e-52c3c1a8b9f1-with-a-long-external-id", last_error=long_error
    )
    dead = make_dead_letter(
        api_client, status=Status.DEAD, reason=DeadLetterReason.RETRIES_EXHAUSTED, last_error="421 4.7.0 try again later"
    )
    Notification.objects.filter(pk=dead.notification_id).update(address="ann@example.com", last_error="421 4.7.0 try again later")
    folder = Path(SCREENSHOT_DIR) if SCREENSHOT_DIR else tmp_path

    user, page = support_page(browser, live_server, viewport=NARROW)
    expect(page.locator("#system-health")).to_be_visible()

    # Both lists fit, the dead letters' Retry buttons on screen.
    page.goto(f"{live_server.url}/admin/notifications/notification/")
    expect(page.locator("#result_list")).to_be_visible()
    assert_fits(page, "the notifications list")
    header = page.locator("#result_list thead th").all_inner_texts()
    assert [text.strip().lower() for text in header[1:]] == [
        "id",
        "user",
        "channel",
        "category",
        "status",
        "last error",
        "created",
    ]
    page.screenshot(path=str(folder / "admin-notifications-1280.png"), full_page=True)
    page.goto(f"{live_server.url}/admin/notifications/deadletter/")
    expect(page.locator("#result_list")).to_be_visible()
    assert_fits(page, "the dead letters list")
    buttons = page.locator("#result_list button.retry-button")
    expect(buttons).to_have_count(4)
    for box in (buttons.nth(i).bounding_box() for i in range(4)):
        assert box is not None and box["x"] + box["width"] <= NARROW["width"], box
    page.screenshot(path=str(folder / "admin-dlq-1280.png"), full_page=True)

    # From the index: the dead count (one click), the notification (two), its Retry.
    page.goto(f"{live_server.url}/admin/")
    page.get_by_role("link", name="dead", exact=True).click()
    row = page.locator("#result_list tbody tr", has_text="421 4.7.0 try again later")
    expect(row).to_have_count(1)
    row.locator("th a").click()
    expect(page.locator("h2, h1").first).to_be_visible()
    assert str(dead.notification_id) in page.url
    page.locator("form.object-tool-form button.retry-button").click()
    expect(page.locator("ul.messagelist li.success")).to_have_text("1 retried, 0 skipped")

    wait_until(
        lambda: Notification.objects.filter(pk=dead.notification_id, status=Status.DELIVERED).exists(),
        timeout=20,
        message="delivered after the click",
    )
    assert [mail.rcpt_tos for mail in smtp_server.received] == [["ann@example.com"]]
    dead.refresh_from_db()
    assert (dead.resolution, dead.resolved_by) == (Resolution.RETRIED, user)
    # Audited as the dead letter's own Retry is, and on the notification's history.
    assert LogEntry.objects.filter(user=user, object_id=str(dead.pk), change_message__startswith="Retried").count() == 1
    assert (
        LogEntry.objects.filter(user=user, object_id=str(dead.notification_id), change_message__startswith="Retried").count() == 1
    )
    # Its page now shows the delivered attempt with its channel and account, and no Retry.
    page.reload()
    expect(page.locator("form.object-tool-form button.retry-button")).to_have_count(0)
    attempt = page.locator(".inline-related tbody tr", has_text="delivered")
    expect(attempt).to_contain_text("email")


# Collected in the page itself, before any of its scripts run (an init script is not subject to the
# page's policy), so a violation while loading is never missed.
RECORD_CSP_VIOLATIONS = """
window.__cspViolations = [];
document.addEventListener("securitypolicyviolation", (event) => {
  window.__cspViolations.push(`${event.violatedDirective} blocked ${event.blockedURI || "inline"} at ${event.sourceFile}:${event.lineNumber}`);
});
"""


@pytest.fixture
def admin_objects() -> tuple[ApiClient, DeadLetter]:
    """A superuser, an API client and a dead letter whose notification can still be cancelled."""
    get_user_model().objects.create_superuser("root", password="root-pass-1")
    api_client, _ = make_api_client("shop")
    dead_letter = make_dead_letter(api_client, last_error="550 5.1.1 mailbox unavailable")
    Notification.objects.filter(pk=dead_letter.notification_id).update(status=Status.ACCEPTED)
    return api_client, dead_letter


def test_the_admin_and_the_api_docs_work_under_the_content_security_policy(
    admin_objects: tuple[ApiClient, DeadLetter], browser: Browser, live_server: Any
) -> None:
    api_client, dead_letter = admin_objects
    page = browser.new_page(viewport={"width": 1400, "height": 900})
    page.add_init_script(RECORD_CSP_VIOLATIONS)
    problems: list[str] = []

    def on_console(message: ConsoleMessage) -> None:
        # A failed load is reported by on_response with its URL; the console's copy has none.
        if message.type == "error" and not message.text.startswith("Failed to load resource"):
            problems.append(f"console error: {message.text}")

    def on_response(response: Response) -> None:
        # Chromium asks for /favicon.ico on its own; the admin has none.
        if response.status >= 400 and not response.url.endswith("/favicon.ico"):
            problems.append(f"HTTP {response.status}: {response.url}")

    page.on("console", on_console)
    page.on("response", on_response)
    page.on("pageerror", lambda error: problems.append(f"page error: {error}"))
    policies: dict[str, str] = {}

    def visit(path: str) -> None:
        response = page.goto(f"{live_server.url}{path}", wait_until="networkidle")
        assert response is not None and response.ok, f"{path}: {response and response.status}"
        policies[path] = response.headers.get("content-security-policy", "")
        problems.extend(f"{path}: {violation}" for violation in page.evaluate("window.__cspViolations"))

    visit("/admin/login/?next=/admin/")
    page.fill("#id_username", "root")
    page.fill("#id_password", "root-pass-1")
    page.click("input[type=submit]")
    expect(page.locator("#system-health")).to_be_visible()
    problems.extend(f"/admin/: {violation}" for violation in page.evaluate("window.__cspViolations"))

    admin_pages = [
        "/admin/",
        "/admin/notifications/notification/",
        f"/admin/notifications/notification/{dead_letter.notification_id}/change/",
        "/admin/notifications/deadletter/",
        f"/admin/notifications/deadletter/{dead_letter.pk}/change/",
        f"/admin/notifications/deadletter/{dead_letter.pk}/discard/",
        "/admin/notifications/apiclient/",
        f"/admin/notifications/apiclient/{api_client.pk}/change/",
        "/admin/notifications/recipient/",
        "/admin/auth/user/",
        "/admin/auth/user/add/",
        "/admin/axes/accessattempt/",
    ]
    for path in admin_pages:
        visit(path)
    # Our own pages' buttons are styled by admin.css, not inline styles the policy would drop.
    visit(f"/admin/notifications/deadletter/{dead_letter.pk}/change/")
    retry = page.locator("form.object-tool-form button.retry-button")
    assert retry.evaluate("button => getComputedStyle(button.form).display") == "inline"
    assert retry.evaluate("button => getComputedStyle(button).paddingLeft") == "12px"
    # The admin's own scripts run: the changelist's select-all checkbox ticks every row (actions.js).
    visit("/admin/notifications/deadletter/")
    page.click("#action-toggle")
    expect(page.locator("input.action-select").first).to_be_checked()

    visit("/api/docs/")
    # Swagger UI (inline bootstrap script, allowed by its nonce) fetched the schema and rendered it.
    expect(page.locator(".opblock").first).to_be_visible(timeout=15_000)
    operations = page.locator(".opblock-summary-path").all_inner_texts()
    assert any(path.startswith("/api/v1/notifications") for path in operations), operations
    problems.extend(f"/api/docs/ (rendered): {violation}" for violation in page.evaluate("window.__cspViolations"))

    for path, policy in policies.items():
        assert "script-src 'self'" in policy and "unsafe-inline" not in policy, f"{path}: {policy!r}"
    assert "'nonce-" in policies["/api/docs/"]
    assert problems == []
