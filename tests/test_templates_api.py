"""Templates through the API on the real services: replace, read, preview, render at accept in the
recipient's locale, and a multipart email with the one-click unsubscribe headers over SMTP."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

import pytest
from rest_framework.test import APIClient

from notifications import services
from notifications.models import Notification, NotificationTemplate, TemplateVariant

from .factories import make_api_client, make_recipient
from .fakes import LocalSmtpServer, smtp_server_fixture  # noqa: F401  (fixture)

WELCOME = {
    "variants": [
        {
            "channel": "email",
            "locale": "en",
            "subject": "Welcome, {{ name }}",
            "body": "Hello {{ name }}, your code is {{ code }}.",
            "html_body": "<p>Hello <b>{{ name }}</b>, your code is {{ code }}.</p>",
        },
        {"channel": "email", "locale": "fr", "subject": "Bienvenue, {{ name }}", "body": "Bonjour {{ name }} ({{ code }})."},
        {"channel": "sms", "locale": "en", "body": "Hi {{ name }}: {{ code }}"},
    ]
}


def put_template(api: APIClient, key: str, body: dict[str, Any]) -> Any:
    return api.put(f"/api/v1/templates/{key}", body, format="json")


def notify(api: APIClient, key: str | None = None, **body: Any) -> Any:
    headers = {"HTTP_IDEMPOTENCY_KEY": key} if key else {}
    return api.post("/api/v1/notifications", {"user_id": "u1", "to": "ann@example.com", **body}, format="json", **headers)


def stored(response: Any) -> Notification:
    assert response.status_code == 202, response.content
    return Notification.objects.get(pk=response.json()["id"])


@pytest.fixture
def welcome(api: APIClient) -> None:
    assert put_template(api, "welcome", WELCOME).status_code == 201


# --- Replace and read ---------------------------------------------------------------------------


def test_put_creates_a_template_with_201_and_a_second_put_replaces_its_variants_with_200(api: APIClient) -> None:
    created = put_template(api, "welcome", WELCOME)
    assert created.status_code == 201, created.content
    assert [(v["channel"], v["locale"]) for v in created.json()["variants"]] == [("email", "en"), ("email", "fr"), ("sms", "en")]

    replaced = put_template(api, "welcome", {"variants": [{"channel": "push", "locale": "en", "body": "Hi"}]})

    assert replaced.status_code == 200
    body = api.get("/api/v1/templates/welcome").json()
    assert body["key"] == "welcome" and body["platform"] is False
    assert body["variants"] == [{"channel": "push", "locale": "en", "subject": "", "body": "Hi", "html_body": ""}]
    assert TemplateVariant.objects.filter(template__key="welcome").count() == 1


def test_get_of_an_unknown_template_is_404(api: APIClient) -> None:
    response = api.get("/api/v1/templates/nope")
    assert response.status_code == 404 and response.json()["error"]["code"] == "not_found"


@pytest.mark.parametrize(
    ("variant", "field"),
    [
        ({"channel": "email", "locale": "en", "body": "Hello {% if name %}"}, "variants[0].body"),
        ({"channel": "email", "locale": "en", "body": "x", "html_body": "{{ name|nosuchfilter }}"}, "variants[0].html_body"),
        ({"channel": "email", "locale": "en", "subject": "{% for %}", "body": "x"}, "variants[0].subject"),
        ({"channel": "email", "locale": "en", "body": "{% include 'admin/base.html' %}"}, "variants[0].body"),
        ({"channel": "email", "locale": "en", "body": "{% debug %}"}, "variants[0].body"),
        ({"channel": "sms", "locale": "en", "body": "x", "html_body": "<p>x</p>"}, "variants[0].html_body"),
        ({"channel": "pigeon", "locale": "en", "body": "x"}, "variants[0].channel"),
        ({"channel": "email", "locale": "not a locale", "body": "x"}, "variants[0].locale"),
        ({"channel": "email", "locale": "en", "body": "x", "htmlbody": "typo"}, "variants[0].htmlbody"),
    ],
)
def test_a_variant_that_does_not_compile_or_is_invalid_is_refused_naming_it(
    api: APIClient, variant: dict[str, Any], field: str
) -> None:
    response = put_template(api, "broken", {"variants": [variant]})
    assert response.status_code == 400, response.content
    assert response.json()["error"]["field"] == field
    assert not NotificationTemplate.objects.filter(client__isnull=False).exists()


def test_two_variants_of_one_channel_and_locale_are_refused_however_the_locale_is_spelt(api: APIClient) -> None:
    variants = [{"channel": "email", "locale": "fr-ca", "body": "a"}, {"channel": "email", "locale": "FR_CA", "body": "b"}]
    response = put_template(api, "twice", {"variants": variants})
    assert response.status_code == 400 and response.json()["error"]["field"] == "variants[1].locale"


def test_templates_belong_to_their_client(api: APIClient, welcome: None) -> None:
    _, token = make_api_client("other")
    other = APIClient()
    other.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    assert other.get("/api/v1/templates/welcome").status_code == 404
    response = notify(other, template="welcome", data={"name": "Ann", "code": 1})
    assert response.status_code == 400 and response.json()["error"]["field"] == "template"


def test_the_platform_template_is_shared_until_a_client_puts_its_own_of_that_key(api: APIClient) -> None:
    platform = api.get("/api/v1/templates/order_created").json()
    assert platform["platform"] is True and {v["channel"] for v in platform["variants"]} == {"email", "sms", "push", "webhook"}

    mine = put_template(api, "order_created", {"variants": [{"channel": "email", "locale": "en", "body": "Mine"}]})
    assert mine.status_code == 201

    assert api.get("/api/v1/templates/order_created").json()["platform"] is False
    _, token = make_api_client("other")
    other = APIClient()
    other.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    assert other.get("/api/v1/templates/order_created").json()["platform"] is True


# --- Preview ------------------------------------------------------------------------------------


def test_preview_renders_text_unescaped_and_html_autoescaped(api: APIClient, welcome: None) -> None:
    response = api.post(
        "/api/v1/templates/welcome/preview",
        {"channel": "email", "locale": "en", "data": {"name": "<Ann & Bo>", "code": 7}},
        format="json",
    )
    assert response.status_code == 200, response.content
    assert response.json() == {
        "subject": "Welcome, <Ann & Bo>",
        "body": "Hello <Ann & Bo>, your code is 7.",
        "html_body": "<p>Hello <b>&lt;Ann &amp; Bo&gt;</b>, your code is 7.</p>",
        "locale": "en",
    }


def test_a_variable_missing_from_data_is_400_naming_it_in_preview_and_at_accept(api: APIClient, welcome: None) -> None:
    preview = api.post("/api/v1/templates/welcome/preview", {"channel": "email", "data": {"name": "Ann"}}, format="json")
    assert preview.status_code == 400
    assert preview.json()["error"]["field"] == "data.code" and "code" in preview.json()["error"]["message"]

    accepted = notify(api, template="welcome", data={"name": "Ann"})

    assert accepted.status_code == 400 and accepted.json()["error"]["field"] == "data.code"
    assert not Notification.objects.exists()


def test_optional_parts_are_written_with_if_and_render_without_the_variable(api: APIClient) -> None:
    body = "Hi{% if name %} {{ name }}{% endif %}.{% for item in items %} {{ item }}{% endfor %}"
    put_template(api, "optional", {"variants": [{"channel": "email", "locale": "en", "body": body}]})
    response = api.post("/api/v1/templates/optional/preview", {"channel": "email"}, format="json")
    assert response.status_code == 200 and response.json()["body"] == "Hi."


def test_preview_of_an_unknown_template_is_404_and_of_a_missing_channel_400(api: APIClient, welcome: None) -> None:
    assert api.post("/api/v1/templates/nope/preview", {"channel": "email"}, format="json").status_code == 404
    response = api.post("/api/v1/templates/welcome/preview", {"channel": "push"}, format="json")
    assert response.status_code == 400 and response.json()["error"]["field"] == "template"


# --- Rendering at accept ------------------------------------------------------------------------


def test_accept_renders_the_template_and_stores_what_is_sent_with_its_key_and_locale(api: APIClient, welcome: None) -> None:
    notification = stored(notify(api, template="welcome", data={"name": "Ann", "code": 42}))
    assert (notification.subject, notification.message) == ("Welcome, Ann", "Hello Ann, your code is 42.")
    assert notification.html_message == "<p>Hello <b>Ann</b>, your code is 42.</p>"
    assert (notification.template_key, notification.locale) == ("welcome", "en")
    read = api.get(f"/api/v1/notifications/{notification.pk}").json()
    assert (read["template"], read["locale"], read["category"]) == ("welcome", "en", "transactional")


def test_a_given_subject_overrides_the_templates(api: APIClient, welcome: None) -> None:
    notification = stored(notify(api, template="welcome", data={"name": "Ann", "code": 1}, subject="Your code"))
    assert notification.subject == "Your code" and notification.message == "Hello Ann, your code is 1."


def test_locale_falls_back_from_fr_ca_to_fr(api: APIClient, welcome: None) -> None:
    notification = stored(notify(api, template="welcome", data={"name": "Ann", "code": 1}, locale="fr-CA"))
    assert (notification.locale, notification.subject, notification.message) == ("fr", "Bienvenue, Ann", "Bonjour Ann (1).")


def test_the_recipients_locale_is_used_when_the_request_names_none_and_default_locale_last(
    api: APIClient, client_and_token: Any, welcome: None
) -> None:
    make_recipient(client_and_token[0], "u1", email="ann@example.com", locale="fr_BE")
    french = stored(notify(api, template="welcome", data={"name": "Ann", "code": 1}))
    german = stored(notify(api, template="welcome", data={"name": "Ann", "code": 1}, locale="de-AT"))
    assert (french.locale, german.locale) == ("fr", "en")


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"template": "nope", "data": {}}, "template"),
        ({"template": "welcome", "data": {"name": "Ann", "code": 1}, "channel": "push", "to": "device-token-1"}, "template"),
        ({"template": "welcome", "data": {"name": "Ann", "code": 1}, "message": "also"}, "template"),
        ({}, "message"),
        ({"message": "hi", "data": {"name": "Ann"}}, "data"),
        ({"template": "welcome", "data": ["not", "an", "object"]}, "data"),
        ({"template": "welcome", "data": {"name": "a\u0000b", "code": 1}}, "data"),
        ({"template": "welcome", "data": {"name": "Ann", "code": 1}, "locale": "fr CA"}, "locale"),
    ],
)
def test_template_requests_that_cannot_be_rendered_are_400_naming_the_field(
    api: APIClient, welcome: None, body: dict[str, Any], field: str
) -> None:
    response = notify(api, **body)
    assert response.status_code == 400, response.content
    assert response.json()["error"]["field"] == field
    assert not Notification.objects.exists()


def test_a_replay_answers_the_first_rendering_even_after_the_template_changed(api: APIClient, welcome: None) -> None:
    body = {"template": "welcome", "data": {"name": "Ann", "code": 1}}
    first = notify(api, key="welcome-ann", **body)
    put_template(api, "welcome", {"variants": [{"channel": "email", "locale": "en", "body": "Changed {{ name }}"}]})

    again = notify(api, key="welcome-ann", **body)

    assert again.status_code == 202 and again.headers["Idempotent-Replayed"] == "true"
    assert again.json() == first.json()
    assert [n.message for n in Notification.objects.all()] == ["Hello Ann, your code is 1."]


# --- The email on the wire ----------------------------------------------------------------------


def test_an_email_with_an_html_variant_goes_out_multipart_with_the_one_click_unsubscribe_headers(
    api: APIClient, welcome: None, smtp_server: LocalSmtpServer
) -> None:
    notification = stored(notify(api, template="welcome", data={"name": "Ann", "code": 42}))

    outcome = services.notification_deliver(notification_id=notification.pk)

    assert outcome.outcome == "delivered"
    [mail] = smtp_server.received
    message = mail.message
    assert message.get_content_type() == "multipart/alternative"
    assert message.get_body(preferencelist=("plain",)).get_content().strip() == "Hello Ann, your code is 42."
    assert message.get_body(preferencelist=("html",)).get_content().strip() == "<p>Hello <b>Ann</b>, your code is 42.</p>"
    assert message["List-Unsubscribe-Post"] == "List-Unsubscribe=One-Click"
    link = message["List-Unsubscribe"].strip()  # folded onto its own line: the URL is longer than one
    assert link.startswith("<http://127.0.0.1:8000/u/") and link.endswith(">")
    assert link.strip("<>") == notification.headers["List-Unsubscribe"].strip("<>")
    target = services.unsubscribe_target(urlsplit(link.strip("<>")).path.removeprefix("/u/"))
    assert (target.user_id, target.category, target.channel) == ("u1", "transactional", "email")


def test_a_plain_message_email_is_a_single_text_part_with_the_unsubscribe_headers(
    api: APIClient, smtp_server: LocalSmtpServer
) -> None:
    notification = stored(notify(api, message="Just text", subject="Plain"))
    services.notification_deliver(notification_id=notification.pk)
    [mail] = smtp_server.received
    assert mail.message.get_content_type() == "text/plain"
    assert mail.message["List-Unsubscribe"].strip().startswith("<http://127.0.0.1:8000/u/")


def test_the_unsubscribe_url_is_offered_to_the_template_for_the_footer(api: APIClient) -> None:
    footer = "Hi.\n--\nUnsubscribe: {{ unsubscribe_url }}"
    put_template(api, "news", {"variants": [{"channel": "email", "locale": "en", "body": footer}]})
    notification = stored(notify(api, template="news", data={}))
    assert notification.message == f"Hi.\n--\nUnsubscribe: {notification.headers['List-Unsubscribe'].strip('<>')}"


def test_the_schema_documents_templates_categories_preferences_and_the_unsubscribe_link(db: None) -> None:
    import yaml
    from django.test import Client

    paths = yaml.safe_load(Client().get("/api/schema/").content)["paths"]
    assert {"put", "get"} <= set(paths["/api/v1/templates/{key}"])
    assert {"200", "400", "404"} <= set(paths["/api/v1/templates/{key}/preview"]["post"]["responses"])
    assert {"put", "get"} <= set(paths["/api/v1/categories/{key}"])
    assert {"put", "get"} <= set(paths["/api/v1/recipients/{user_id}/preferences"])
    assert {"get", "post"} <= set(paths["/u/{token}"])
    create = paths["/api/v1/notifications"]["post"]["requestBody"]["content"]["application/json"]["schema"]["$ref"]
    assert create.endswith("NotificationCreateRequest")
