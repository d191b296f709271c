"""Templates are bounded wherever they render: what can be known when one is stored is refused then
(400 naming the field, a form error in the admin), and a render stops itself at
TEMPLATE_RENDER_SECONDS of work or MAX_MESSAGE_BYTES of output with a render_limit error."""

from __future__ import annotations

import json
import time
from typing import Any

import dramatiq
import pytest
from django.test import Client
from rest_framework.test import APIClient

from notifications import services
from notifications.models import Digest, Notification, NotificationTemplate, Status

from .factories import accept_notification, make_api_client, make_template
from .fakes import LocalSmtpServer, override_notifications, smtp_server_fixture  # noqa: F401  (fixture)
from .test_admin import messages_of
from .test_admin_templates import TEMPLATES_URL, superuser, variant_form  # noqa: F401  (fixture)

NESTED_IFS = "{% if a %}" * 1000 + "x" + "{% endif %}" * 1000
BOMBS = {
    "ljust": '{{ "x"|ljust:"2000000000" }}',
    "lorem": "{% lorem 100000000 w %}",
    "nested_loops": '{% for a in "x"|ljust:"100000" %}{% for b in "x"|ljust:"100000" %}{{ a }}{% endfor %}{% endfor %}',
    "nested_ifs": NESTED_IFS,
}
# Widths and counts past the limits, each in a place a filter can sit.
OVER_LIMITS = [
    "{{ name|rjust:'5000' }}",
    "{{ name|center:'1001' }}",
    "{{ name|stringformat:'099999999d' }}",
    "{{ price|floatformat:'-100000' }}",
    "{% filter ljust:'100000' %}x{% endfilter %}",
    "{% with wide=name|ljust:'100000' %}{{ wide|length }}{% endwith %}",
    "{% if name|center:'100000' %}x{% endif %}",
    "{% lorem 101 p %}",
    "{% lorem count w %}",
    "{% for c in 'abc' %}{{ c }}{% endfor %}",
    "{% if " + " and ".join(["a"] * 100) + " %}x{% endif %}",
    "{{ name|ljust:'wide' }}",
]
# Loops over the data: accepted when stored, bounded only when rendered.
SQUARE = "{% for a in items %}{% for b in items %}{% endfor %}{% endfor %}"
LISTING = "{% for a in items %}{{ a }},{% endfor %}"


def put_body(api: APIClient, key: str, body: str, part: str = "body") -> Any:
    variant = {"channel": "email", "locale": "en", "body": "x", part: body}
    return api.put(f"/api/v1/templates/{key}", {"variants": [variant]}, format="json")


def preview(api: APIClient, key: str, data: dict[str, Any]) -> Any:
    return api.post(f"/api/v1/templates/{key}/preview", {"channel": "email", "data": data}, format="json")


def timed(call: Any) -> tuple[Any, float]:
    started = time.monotonic()
    result = call()
    return result, time.monotonic() - started


@pytest.mark.parametrize("bomb", BOMBS.values(), ids=BOMBS.keys())
def test_each_template_bomb_is_refused_at_put_with_400_naming_the_field(api: APIClient, bomb: str) -> None:
    response, seconds = timed(lambda: put_body(api, "bomb", bomb))

    assert response.status_code == 400, response.content
    error = response.json()["error"]
    assert (error["code"], error["field"]) == ("invalid", "variants[0].body")
    assert seconds < 5
    assert not NotificationTemplate.objects.filter(key="bomb").exists()


@pytest.mark.parametrize("source", OVER_LIMITS)
def test_widths_counts_literal_loops_and_long_conditions_past_the_limits_are_refused_at_put(api: APIClient, source: str) -> None:
    response = put_body(api, "wide", source, part="html_body")

    assert response.status_code == 400, response.content
    assert response.json()["error"]["field"] == "variants[0].html_body"
    assert "refused" in response.json()["error"]["message"]


def test_widths_and_counts_within_the_limits_render(api: APIClient) -> None:
    body = (
        "{{ name|ljust:'6' }}|{{ name|rjust:'6' }}|{{ name|center:'7' }}|{{ n|stringformat:'05d' }}|"
        "{{ price|floatformat:'2' }}|{% lorem 3 w %}|{% for c in name %}{{ c }}.{% endfor %}"
    )
    assert put_body(api, "fine", body).status_code == 201

    response = preview(api, "fine", {"name": "Ann", "n": 7, "price": 1.5})

    assert response.status_code == 200, response.content
    assert response.json()["body"] == "Ann   |   Ann|  Ann  |00007|1.50|lorem ipsum dolor|A.n.n."


@pytest.mark.parametrize("bomb", BOMBS.values(), ids=BOMBS.keys())
def test_a_bomb_stored_before_the_checks_is_refused_at_preview_not_rendered(api: APIClient, bomb: str) -> None:
    make_template("old", subject="Hi", body=bomb, html_body="")

    response, seconds = timed(lambda: preview(api, "old", {"a": True}))

    assert response.status_code == 400, response.content
    assert response.json()["error"]["field"] == "template"
    assert response.json()["error"]["message"].startswith("the template is refused: ")
    assert seconds < 5


def test_deep_nesting_is_a_form_error_in_the_admin_not_a_500(superuser: Client) -> None:  # noqa: F811
    response = superuser.post(f"{TEMPLATES_URL}add/", {"key": "deep", "client": "", **variant_form(body=NESTED_IFS)})

    assert response.status_code == 200
    [errors] = response.context["inline_admin_formsets"][0].formset.errors
    assert "nest deeper" in str(errors["body"])
    assert not NotificationTemplate.objects.filter(key="deep").exists()


@pytest.mark.parametrize("bomb", [BOMBS["ljust"], BOMBS["lorem"], BOMBS["nested_loops"]], ids=["ljust", "lorem", "loops"])
def test_a_bomb_is_a_form_error_in_the_admin(superuser: Client, bomb: str) -> None:  # noqa: F811
    response = superuser.post(f"{TEMPLATES_URL}add/", {"key": "bomb", "client": "", **variant_form(html_body=bomb)})

    assert response.status_code == 200
    [errors] = response.context["inline_admin_formsets"][0].formset.errors
    assert "html_body" in errors
    assert not NotificationTemplate.objects.filter(key="bomb").exists()


# --- Bounded when rendered ----------------------------------------------------------------------


@override_notifications(TEMPLATE_RENDER_SECONDS=0.3)
def test_a_render_past_its_time_budget_stops_there_at_preview_and_at_accept(api: APIClient) -> None:
    assert put_body(api, "square", SQUARE).status_code == 201  # nothing to know when stored
    data = {"items": list(range(3000))}  # 9 million steps: far past 0.3 s

    previewed, preview_seconds = timed(lambda: preview(api, "square", data))
    accepted, accept_seconds = timed(
        lambda: api.post(
            "/api/v1/notifications", {"user_id": "u1", "to": "ann@example.com", "template": "square", "data": data}, format="json"
        )
    )

    for response in (previewed, accepted):
        assert response.status_code == 400, response.content
        error = response.json()["error"]
        assert (error["code"], error["field"]) == ("render_limit", "template")
        assert "exceeded 0.3 s" in error["message"]
    assert preview_seconds < 2 and accept_seconds < 2
    assert not Notification.objects.exists()


@override_notifications(MAX_MESSAGE_BYTES=1000)
def test_a_render_stops_once_its_output_passes_max_message_bytes(api: APIClient) -> None:
    assert put_body(api, "listing", LISTING).status_code == 201

    small = preview(api, "listing", {"items": list(range(10))})
    large = preview(api, "listing", {"items": list(range(1000))})  # 3,890 bytes

    assert small.status_code == 200 and small.json()["body"] == "0,1,2,3,4,5,6,7,8,9,"
    assert large.status_code == 400, large.content[:200]
    assert large.json()["error"]["code"] == "render_limit", large.json()
    assert "MAX_MESSAGE_BYTES (1000 bytes)" in large.json()["error"]["message"]


def test_a_width_from_data_is_bounded_when_rendered(api: APIClient) -> None:
    assert put_body(api, "padded", "[{{ name|ljust:width }}]").status_code == 201

    assert preview(api, "padded", {"name": "Ann", "width": 5}).json()["body"] == "[Ann  ]"
    response = preview(api, "padded", {"name": "Ann", "width": 10_000_000})

    assert response.status_code == 400, response.content[:200]
    assert response.json()["error"]["code"] == "render_limit"
    assert "ljust takes a whole number up to 1000" in response.json()["error"]["message"]


@override_notifications(MAX_MESSAGE_BYTES=1000)
def test_a_join_whose_output_would_pass_max_message_bytes_is_stopped_before_it_is_built(api: APIClient) -> None:
    assert put_body(api, "joined", "{{ items|join:glue }}").status_code == 201

    response = preview(api, "joined", {"items": list(range(100)), "glue": "-" * 100})

    assert response.status_code == 400 and response.json()["error"]["code"] == "render_limit"


@override_notifications(TEMPLATE_RENDER_SECONDS=0.3)
def test_the_admin_preview_and_send_test_stop_at_the_budget_with_a_message(
    superuser: Client,  # noqa: F811
    smtp_server: LocalSmtpServer,
) -> None:
    template = make_template("square", subject="Hi", body=SQUARE, html_body="")
    sample = json.dumps({"items": list(range(3000))})
    url = f"{TEMPLATES_URL}{template.pk}/try/"

    previewed, preview_seconds = timed(
        lambda: superuser.post(url, {"variant": "email/en", "sample_data": sample, "_preview": "1"})
    )
    sent, send_seconds = timed(
        lambda: superuser.post(url, {"variant": "email/en", "sample_data": sample, "to": "qa@example.com", "_send_test": "1"})
    )

    assert previewed.status_code == 200 and previewed.context["rendered"] is None
    assert any(m.startswith("Cannot render: the template's render exceeded 0.3 s") for m in messages_of(previewed))
    assert sent.status_code == 200
    assert any(m.startswith("Test not sent: the template's render exceeded 0.3 s") for m in messages_of(sent))
    assert not smtp_server.received
    assert preview_seconds < 2 and send_seconds < 2


def test_at_the_default_budget_a_preview_that_loops_over_its_data_is_400_within_about_a_second(api: APIClient) -> None:
    assert put_body(api, "square", SQUARE).status_code == 201

    response, seconds = timed(lambda: preview(api, "square", {"items": list(range(3000))}))

    assert response.status_code == 400, response.content[:200]
    assert response.json()["error"] == {
        "code": "render_limit",
        "message": "the template's render exceeded 1 s",
        "field": "template",
    }
    assert seconds < 2.5


def test_a_batchs_renders_share_one_budget_so_ten_slow_items_stop_within_about_a_second(api: APIClient) -> None:
    assert put_body(api, "square", SQUARE).status_code == 201
    item = {"user_id": "u1", "to": "ann@example.com", "template": "square", "data": {"items": list(range(3000))}}

    response, seconds = timed(lambda: api.post("/api/v1/notifications/batch", {"notifications": [item] * 10}, format="json"))

    assert response.status_code == 202, response.content[:300]
    errors = [result["error"] for result in response.json()["results"]]
    assert {(error["code"], error["message"]) for error in errors} == {
        ("render_limit", "the batch's template renders exceeded 1 s")
    }
    assert seconds < 3  # 10 s were each item given 1 s of its own
    assert not Notification.objects.exists()


@override_notifications(MAX_MESSAGE_BYTES=1000)
@pytest.mark.parametrize(
    "body",
    [
        "{{ text" + "|addslashes" * 40 + " }}",  # each backslash doubled at each filter: 2**40 within one node
        "{% with a=text|add:text %}{% with b=a|add:a %}{% with c=b|add:b %}{% with d=c|add:c %}"
        "{% with e=d|add:d %}{% with f=e|add:e %}{{ f|length }}"
        "{% endwith %}{% endwith %}{% endwith %}{% endwith %}{% endwith %}{% endwith %}",
    ],
    ids=["addslashes-chain", "doubling-withs"],
)
def test_a_filter_that_multiplies_its_input_stops_at_max_message_bytes_within_the_node(api: APIClient, body: str) -> None:
    assert put_body(api, "growing", body).status_code == 201

    response = preview(api, "growing", {"text": "\\" * 100})

    assert response.status_code == 400, response.content[:200]
    assert response.json()["error"]["code"] == "render_limit"


def test_a_digest_whose_close_render_passes_the_budget_is_sent_as_a_failed_notification_saying_so(
    broker: dramatiq.Broker, db: None
) -> None:
    template = make_template("activity", subject="", body="{{ count }} updates", html_body="")
    client, _ = make_api_client()
    accept_notification(
        client,
        message="",
        template="activity",
        data={"xs": list(range(3000))},
        digest=services.DigestRequest(key="activity", window_seconds=60),
    )
    # Edited since (a client's PUT would store it: it loops over data): 9 million steps at the close.
    template.variants.update(
        body="{% for item in items %}{% for a in item.xs %}{% for b in item.xs %}{% endfor %}{% endfor %}{% endfor %}"
    )
    digest = Digest.objects.get()

    result, seconds = timed(lambda: services.digest_close(digest_id=digest.pk, now=digest.closes_at))

    sent = Notification.objects.get(pk=result.notification_id)
    assert (sent.status, sent.enqueued_at) == (Status.FAILED, None)
    assert "the template's render exceeded 1 s" in sent.last_error
    assert seconds < 2.5
