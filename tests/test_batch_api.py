"""POST /api/v1/notifications/batch: each item is validated, accepted and reported on its own, and
metadata PostgreSQL's jsonb cannot hold is a 400 naming ``metadata``, never a 500."""

from __future__ import annotations

import json
import logging
from typing import Any

import pytest
from django.db import connection
from rest_framework.test import APIClient

from notifications import services
from notifications.models import Notification

URL = "/api/v1/notifications"
ITEM = {"user_id": "u1", "to": "ann@example.com", "message": "Your order shipped"}


def _item_with_metadata(metadata_json: str) -> str:
    """An item as raw JSON, so the metadata can be what a test client's encoder would refuse."""
    return json.dumps(ITEM)[:-1] + f', "metadata": {metadata_json}}}'


def post_raw(api: APIClient, url: str, body: str):  # type: ignore[no-untyped-def]
    # A 500 comes back as a response, as a client sees it, instead of raising in the test.
    api.raise_request_exception = False
    return api.post(url, data=body.encode(), content_type="application/json")


def post_batch(api: APIClient, items: list[str]):  # type: ignore[no-untyped-def]
    return post_raw(api, f"{URL}/batch", '{"notifications": [' + ", ".join(items) + "]}")


def test_an_item_with_an_overflowing_number_is_its_own_400_and_the_items_around_it_are_accepted_once(
    transactional_db: None, api: APIClient
) -> None:
    # Each item commits on its own (no test transaction around them), as in production.
    first, last = json.dumps({**ITEM, "user_id": "first"}), json.dumps({**ITEM, "user_id": "last"})
    response = post_batch(api, [first, _item_with_metadata('{"amount": 1e999}'), last])
    assert response.status_code == 202, response.content
    results = response.json()["results"]
    assert [r["status"] for r in results] == [202, 400, 202]
    assert results[1]["error"]["code"] == "invalid" and results[1]["error"]["field"] == "metadata"
    stored = Notification.objects.order_by("created_at").values_list("id", "user_id")
    assert [(str(id_), user_id) for id_, user_id in stored] == [
        (results[0]["body"]["id"], "first"),
        (results[2]["body"]["id"], "last"),
    ]


NOT_STORABLE = [
    pytest.param('{"amount": 1e999}', id="overflow-to-infinity"),
    pytest.param('{"amount": -1e999}', id="overflow-to-minus-infinity"),
    pytest.param('{"lines": [1, {"price": 2.5e400}]}', id="overflow-nested-in-a-list"),
    pytest.param('{"note": "\\ud800"}', id="lone-surrogate-in-a-value"),
    pytest.param('{"\\udfff": "x"}', id="lone-surrogate-in-a-key"),
    pytest.param('{"tags": ["ok", "\\ud83d"]}', id="lone-surrogate-in-a-list"),
    pytest.param('{"a": {"b": "c\\u0000"}}', id="nul-nested"),
    # Deep enough to overflow the old recursive NUL check, shallow enough for the JSON parser.
    pytest.param('{"d": ' + '{"d": ' * 400 + "1" + "}" * 400 + "}", id="nested-400-deep-objects"),
    pytest.param('{"d": ' + "[" * 400 + "]" * 400 + "}", id="nested-400-deep-arrays"),
]


@pytest.mark.parametrize("metadata_json", NOT_STORABLE)
def test_metadata_jsonb_cannot_hold_is_400_naming_metadata(api: APIClient, metadata_json: str) -> None:
    response = post_raw(api, URL, _item_with_metadata(metadata_json))
    assert response.status_code == 400, response.content
    error = response.json()["error"]
    assert error["code"] == "invalid" and error["field"] == "metadata" and error["message"]
    assert Notification.objects.count() == 0


@pytest.mark.parametrize("metadata_json", NOT_STORABLE)
def test_metadata_jsonb_cannot_hold_is_a_400_slot_in_a_batch(api: APIClient, metadata_json: str) -> None:
    response = post_batch(api, [json.dumps(ITEM), _item_with_metadata(metadata_json)])
    assert response.status_code == 202, response.content
    results = response.json()["results"]
    assert [r["status"] for r in results] == [202, 400]
    assert results[1]["error"]["field"] == "metadata"
    assert Notification.objects.count() == 1


def test_nan_and_infinity_literals_are_refused_as_invalid_json(api: APIClient) -> None:
    # Not JSON at all (RFC 8259), so the parser refuses the whole body before any item is accepted.
    for literal in ("NaN", "Infinity", "-Infinity"):
        response = post_batch(api, [json.dumps(ITEM), _item_with_metadata(f'{{"x": {literal}}}')])
        assert response.status_code == 400, response.content
        assert response.json()["error"]["code"] == "parse_error"
    assert Notification.objects.count() == 0


def _nested_lists(levels: int) -> list[Any]:
    nested: list[Any] = []
    for _ in range(levels):
        nested = [nested]
    return nested


@pytest.mark.parametrize(
    ("metadata", "problem"),
    [
        ({"x": float("nan")}, "finite"),
        ({"x": [float("inf")]}, "finite"),
        ({"x": "a\x00b"}, "NUL"),
        ({"x": "\ud800"}, "surrogate"),
        ({"a": {"b": {"c": 1}}}, None),
        ({"many": list(range(20_000))}, "bytes"),
        ({"deep": _nested_lists(900)}, "levels deep"),
        ({"deep": _nested_lists(100_000)}, "levels deep"),
        ({"n": None, "t": True, "i": 10**30, "f": -0.5, "s": "é", "l": []}, None),
    ],
)
def test_metadata_problem_names_what_jsonb_would_refuse(metadata: dict[str, Any], problem: str | None) -> None:
    from notifications.api.serializers import metadata_problem

    found = metadata_problem(metadata)
    assert found == problem if problem is None else (found is not None and problem in found)


def test_metadata_nested_900_deep_is_400_not_500(api: APIClient) -> None:
    # Whether the JSON parser itself gets through 900 levels depends on the stack it runs on, so
    # either refusal is right: the whole body as a parse error, or the item naming metadata.
    deep = _item_with_metadata('{"d": ' + "[" * 900 + "]" * 900 + "}")
    single = post_raw(api, URL, deep)
    assert single.status_code == 400, single.content
    assert single.json()["error"].get("field", "metadata") == "metadata"
    batch = post_batch(api, [json.dumps(ITEM), deep])
    if batch.status_code == 400:
        assert batch.json()["error"]["code"] == "parse_error"
        assert Notification.objects.count() == 0
    else:
        assert batch.status_code == 202, batch.content
        assert [r["status"] for r in batch.json()["results"]] == [202, 400]
        assert Notification.objects.count() == 1


def test_request_text_echoed_in_an_item_error_cannot_fail_the_batch(api: APIClient) -> None:
    # A lone surrogate cannot be encoded as UTF-8: echoed raw in one slot's error, it made the
    # whole response unrenderable after the items before it were committed.
    items = [
        json.dumps(ITEM),
        json.dumps({**ITEM, "channel": "\ud800"}),
        json.dumps({**ITEM, "\udfff": "unknown field"}),
        json.dumps({**ITEM, "user_id": "u2"}),
    ]
    response = post_batch(api, items)
    assert response.status_code == 202, response.content
    results = response.json()["results"]
    assert [r["status"] for r in results] == [202, 400, 400, 202]
    assert results[1]["error"]["field"] == "channel"
    assert results[2]["error"]["message"]
    assert Notification.objects.count() == 2


def test_metadata_may_nest_to_the_limit_and_no_deeper(api: APIClient) -> None:
    from notifications.api.serializers import MAX_METADATA_DEPTH

    def nested(levels: int) -> str:
        return '{"d": ' * levels + "1" + "}" * levels

    # The metadata object itself is the first level.
    at_limit = post_raw(api, URL, _item_with_metadata(nested(MAX_METADATA_DEPTH)))
    assert at_limit.status_code == 202, at_limit.content
    over = post_raw(api, URL, _item_with_metadata(nested(MAX_METADATA_DEPTH + 1)))
    assert over.status_code == 400 and over.json()["error"]["field"] == "metadata"
    assert Notification.objects.count() == 1


def test_an_unexpected_error_in_one_item_is_its_own_500_slot_and_the_others_still_go_through(
    transactional_db: None, api: APIClient, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    accept = services.notification_accept

    def failing_for_u2(**kwargs: Any) -> services.AcceptResult:
        if kwargs["request"].user_id == "u2":
            with connection.cursor() as cursor:
                cursor.execute("SELECT 1 / 0")  # a real database error, on the connection u3 then uses
        return accept(**kwargs)

    def batch_write_fails(**kwargs: Any) -> Any:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1 / 0")

    # The batch's one write fails as a whole, so its items are accepted one by one; one of those
    # fails unexpectedly too.
    monkeypatch.setattr(services, "notification_accept_batch", batch_write_fails)
    monkeypatch.setattr(services, "notification_accept", failing_for_u2)
    items = [json.dumps({**ITEM, "user_id": user_id}) for user_id in ("u1", "u2", "u3")]
    with caplog.at_level(logging.ERROR):
        response = post_batch(api, items)
    assert response.status_code == 202, response.content
    results = response.json()["results"]
    assert [r["status"] for r in results] == [202, 500, 202]
    assert results[1]["error"]["code"] == "internal_error" and results[1]["error"]["message"]
    assert "division by zero" not in json.dumps(results[1])  # internals stay in the log
    assert sorted(Notification.objects.values_list("user_id", flat=True)) == ["u1", "u3"]
    logged = [r for r in caplog.records if r.exc_info and "division by zero" in str(r.exc_info[1])]
    assert logged and logged[0].levelno == logging.ERROR and logged[0].name == "notifications.api"


def test_a_retried_batch_replays_the_accepted_items_and_creates_nothing_twice(api: APIClient) -> None:
    items = [
        json.dumps({**ITEM, "idempotency_key": "batch-1"}),
        _item_with_metadata('{"amount": 1e999}')[:-1] + ', "idempotency_key": "batch-2"}',
    ]
    first = post_batch(api, items).json()["results"]
    again = post_batch(api, items).json()["results"]
    assert [r["status"] for r in first] == [r["status"] for r in again] == [202, 400]
    assert again[0]["body"] == first[0]["body"]
    assert Notification.objects.count() == 1
