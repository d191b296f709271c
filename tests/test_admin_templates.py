"""The admin's templates: inline variants checked when saved, Preview with sample data, Send test to
an address (audited), and the notification list's suppressed filter."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.admin.models import LogEntry
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Permission
from django.test import Client

from notifications.models import NotificationTemplate, Status, SuppressedReason

from .factories import make_api_client, make_template
from .fakes import LocalSmtpServer, smtp_server_fixture  # noqa: F401  (fixture)
from .test_admin import make_notification, messages_of, support_group

TEMPLATES_URL = "/admin/notifications/notificationtemplate/"


def variant_form(prefix: str = "variants", **variant: str) -> dict[str, str]:
    """The add page's POST: the template's fields and one inline variant."""
    values = {"channel": "email", "locale": "en", "subject": "Hi {{ name }}", "body": "Hello {{ name }}", "html_body": ""}
    values.update(variant)
    return {
        f"{prefix}-TOTAL_FORMS": "1",
        f"{prefix}-INITIAL_FORMS": "0",
        f"{prefix}-MIN_NUM_FORMS": "1",
        f"{prefix}-MAX_NUM_FORMS": "1000",
        **{f"{prefix}-0-{name}": value for name, value in values.items()},
    }


def logged_in(user: Any) -> Client:
    browser = Client()
    browser.force_login(user)
    return browser


@pytest.fixture
def superuser(db: None) -> Client:
    return logged_in(get_user_model().objects.create_superuser("root", password="root-pass-1"))


@pytest.fixture
def support(db: None) -> Client:
    user = get_user_model().objects.create_user("sam", password="support-pass-1", is_staff=True)
    user.groups.add(support_group())
    return logged_in(user)


@pytest.fixture
def welcome(db: None) -> NotificationTemplate:
    return make_template("welcome")


def test_a_superuser_adds_a_template_with_an_inline_variant(superuser: Client) -> None:
    response = superuser.post(f"{TEMPLATES_URL}add/", {"key": "welcome", "client": "", **variant_form(locale="fr_ca")})

    assert response.status_code == 302, response.context and response.context["inline_admin_formsets"][0].formset.errors
    template = NotificationTemplate.objects.get(key="welcome")
    assert list(template.variants.values_list("channel", "locale", "body")) == [("email", "fr-CA", "Hello {{ name }}")]


@pytest.mark.parametrize(
    ("variant", "field"),
    [
        ({"body": "Hello {% if name %}"}, "body"),
        ({"html_body": "{{ name|nosuchfilter }}"}, "html_body"),
        ({"channel": "sms", "html_body": "<p>x</p>"}, "html_body"),
        ({"locale": "not a locale"}, "locale"),
    ],
)
def test_a_variant_that_does_not_compile_is_refused_when_saved(superuser: Client, variant: dict[str, str], field: str) -> None:
    response = superuser.post(f"{TEMPLATES_URL}add/", {"key": "broken", "client": "", **variant_form(**variant)})

    assert response.status_code == 200  # the form again, with the error
    [errors] = response.context["inline_admin_formsets"][0].formset.errors
    assert field in errors, errors
    assert not NotificationTemplate.objects.filter(key="broken").exists()


def test_the_change_page_links_to_preview_and_send_test(superuser: Client, welcome: NotificationTemplate) -> None:
    page = superuser.get(f"{TEMPLATES_URL}{welcome.pk}/change/")
    assert f'href="{TEMPLATES_URL}{welcome.pk}/try/"' in page.content.decode()


def test_preview_renders_the_variant_with_sample_data(superuser: Client, welcome: NotificationTemplate) -> None:
    response = superuser.post(
        f"{TEMPLATES_URL}{welcome.pk}/try/", {"variant": "email/en", "sample_data": '{"name": "<Ann>"}', "_preview": "1"}
    )

    assert response.status_code == 200
    rendered = response.context["rendered"]
    assert (rendered.subject, rendered.body, rendered.html_body) == (
        "Welcome, <Ann>",
        "Hello <Ann>",
        "<p>Hello <b>&lt;Ann&gt;</b></p>",
    )
    assert "Hello &lt;Ann&gt;" in response.content.decode()  # shown as text on the page, never as markup


def test_preview_with_a_variable_missing_says_which(superuser: Client, welcome: NotificationTemplate) -> None:
    response = superuser.post(f"{TEMPLATES_URL}{welcome.pk}/try/", {"variant": "email/en", "sample_data": "{}", "_preview": "1"})
    assert response.context["rendered"] is None
    assert any("name" in message for message in messages_of(response))


def test_send_test_sends_to_the_address_over_smtp_and_is_audited(
    superuser: Client, welcome: NotificationTemplate, smtp_server: LocalSmtpServer
) -> None:
    response = superuser.post(
        f"{TEMPLATES_URL}{welcome.pk}/try/",
        {"variant": "email/en", "sample_data": '{"name": "Ann"}', "to": "qa@example.com", "_send_test": "1"},
    )

    assert response.status_code == 200
    assert any(message.startswith("Test sent to qa@example.com") for message in messages_of(response))
    [mail] = smtp_server.received
    assert mail.rcpt_tos == ["qa@example.com"] and mail.message["Subject"] == "Welcome, Ann"
    assert mail.message.get_content_type() == "multipart/alternative"
    entry = LogEntry.objects.get(object_id=str(welcome.pk))
    assert entry.get_change_message() == "Sent a test of email/en to qa@example.com"


def test_a_viewer_may_preview_but_not_send_a_test(db: None, welcome: NotificationTemplate, smtp_server: LocalSmtpServer) -> None:
    viewer = get_user_model().objects.create_user("vera", password="viewer-pass-1", is_staff=True)
    viewer.user_permissions.add(Permission.objects.get(codename="view_notificationtemplate"))
    browser = logged_in(viewer)
    url = f"{TEMPLATES_URL}{welcome.pk}/try/"
    preview = browser.post(url, {"variant": "email/en", "sample_data": '{"name": "Ann"}', "_preview": "1"})
    assert preview.status_code == 200 and preview.context["rendered"].body == "Hello Ann"
    assert 'name="_send_test"' not in preview.content.decode()
    sent = browser.post(url, {"variant": "email/en", "sample_data": '{"name": "Ann"}', "to": "qa@example.com", "_send_test": "1"})
    assert sent.status_code == 403 and smtp_server.received == []


def test_support_filters_the_notification_list_by_suppressed_and_its_reason(support: Client) -> None:
    api_client, _ = make_api_client()
    unsubscribed = make_notification(api_client, status=Status.SUPPRESSED, suppressed_reason=SuppressedReason.UNSUBSCRIBED)
    default_off = make_notification(api_client, status=Status.SUPPRESSED, suppressed_reason=SuppressedReason.DEFAULT_OFF)
    make_notification(api_client, status=Status.DELIVERED)

    def found(**params: Any) -> set[Any]:
        response = support.get("/admin/notifications/notification/", params)
        assert response.status_code == 200
        return {n.pk for n in response.context["cl"].result_list}

    assert found(status__exact="suppressed") == {unsubscribed.pk, default_off.pk}
    assert found(suppressed_reason__exact="unsubscribed") == {unsubscribed.pk}
    page = support.get(f"/admin/notifications/notification/{default_off.pk}/change/").content.decode()
    assert "Default Off" in page or "default_off" in page
