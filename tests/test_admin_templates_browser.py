"""The template Preview in a real headless Chromium: log in, open a template, Preview and send
test, fill sample data, and read the rendering (the browser set-up of test_admin_browser.py)."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth import get_user_model
from playwright.sync_api import Browser, expect

from .factories import make_template
from .test_admin_browser import browser_fixture  # noqa: F401  (fixture; sets DJANGO_ALLOW_ASYNC_UNSAFE for Playwright)

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_an_admin_previews_a_template_with_sample_data_in_the_browser(live_server: Any, request: pytest.FixtureRequest) -> None:
    chromium: Browser = request.getfixturevalue("browser")
    get_user_model().objects.create_superuser("root", password="root-pass-1")
    template = make_template("welcome", html_body="<p>Hi <b>{{ name }}</b></p>")

    page = chromium.new_page()
    page.goto(f"{live_server.url}/admin/login/?next=/admin/notifications/notificationtemplate/{template.pk}/change/")
    page.fill("#id_username", "root")
    page.fill("#id_password", "root-pass-1")
    page.click("input[type=submit]")
    page.click("a.try-link")
    page.fill("#id_sample_data", '{"name": "<Ann>"}')
    page.click("input.preview-button")

    expect(page.locator(".rendered-subject")).to_have_text("Welcome, <Ann>")
    expect(page.locator(".rendered-body")).to_have_text("Hello <Ann>")
    # The HTML part is shown as its source, escaped for the page: a client wrote the template.
    expect(page.locator(".rendered-html")).to_have_text("<p>Hi <b>&lt;Ann&gt;</b></p>")
    expect(page.locator(".rendered-html b")).to_have_count(0)
