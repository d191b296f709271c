"""POST /api/v1/notifications: validation, idempotency, ownership, reading and cancelling."""

from __future__ import annotations

import threading
import uuid
from datetime import timedelta

import pytest
from django.db import connection
from django.test import override_settings
from django.utils import timezone
from rest_framework.test import APIClient

from notifications.models import IdempotencyKey, Notification, Status

from .factories import make_api_client, make_recipient
from .fakes import override_notifications
from .helpers import wait_until

URL = "/api/v1/notifications"
BODY = {"user_id": "u1", "to": "ann@example.com", "subject": "Shipped", "message": "Your order shipped"}


def post(api: APIClient, body: object, key: str | None = None, **extra: str):  # type: ignore[no-untyped-def]
    headers = {"HTTP_IDEMPOTENCY_KEY": key} if key else {}
    return api.post(URL, body, format="json", **headers, **extra)


def test_accept_answers_202_with_id_status_and_key(api: APIClient) -> None:
    response = post(api, BODY, key="order-42")
    assert response.status_code == 202
    body = response.json()
    # Written already queued, so the publish after commit needs no further write.
    assert body["status"] == "queued" and body["idempotency_key"] == "order-42"
    notification = Notification.objects.get(pk=body["id"])
    assert (notification.channel, notification.address, notification.status) == ("email", "ann@example.com", Status.QUEUED)
    assert notification.enqueued_at is not None


def test_accept_without_key_generates_one(api: APIClient) -> None:
    body = post(api, BODY).json()
    assert uuid.UUID(body["idempotency_key"])
    assert IdempotencyKey.objects.filter(key=body["idempotency_key"], state="completed").exists()


def test_key_may_come_in_the_body(api: APIClient) -> None:
    first = post(api, {**BODY, "idempotency_key": "in-body"})
    again = post(api, {**BODY, "idempotency_key": "in-body"})
    assert first.status_code == again.status_code == 202
    assert first.json() == again.json() and Notification.objects.count() == 1


def test_same_key_same_body_replays_the_first_response(api: APIClient) -> None:
    first = post(api, BODY, key="k-1")
    second = post(api, dict(reversed(list(BODY.items()))), key="k-1")  # key order does not matter
    assert second.status_code == 202 and second.json() == first.json()
    assert second.headers["Idempotent-Replayed"] == "true"
    assert Notification.objects.count() == 1


def test_same_key_different_body_is_rejected_with_422(api: APIClient) -> None:
    post(api, BODY, key="k-2")
    response = post(api, {**BODY, "message": "something else"}, key="k-2")
    assert response.status_code == 422
    assert response.json()["error"]["code"] == "idempotency_key_reused"
    assert Notification.objects.count() == 1


def test_same_key_left_in_flight_by_an_older_version_is_409(api: APIClient, client_and_token) -> None:  # type: ignore[no-untyped-def]
    from notifications.services import request_fingerprint

    client, _ = client_and_token
    IdempotencyKey.objects.create(
        client=client, key="k-3", fingerprint=request_fingerprint(BODY), expires_at=timezone.now() + timedelta(hours=1)
    )
    response = post(api, BODY, key="k-3")
    assert response.status_code == 409
    assert response.json()["error"]["code"] == "idempotency_key_in_flight"


def test_expired_key_can_be_used_again(api: APIClient) -> None:
    first = post(api, BODY, key="k-old").json()
    IdempotencyKey.objects.filter(key="k-old").update(expires_at=timezone.now() - timedelta(seconds=1))
    second = post(api, {**BODY, "message": "new"}, key="k-old")
    assert second.status_code == 202 and second.json()["id"] != first["id"]


def test_a_rejected_request_frees_its_key(api: APIClient) -> None:
    assert post(api, {**BODY, "to": "not-an-email"}, key="k-fix").status_code == 400
    assert post(api, BODY, key="k-fix").status_code == 202


@pytest.mark.django_db(transaction=True)
def test_two_concurrent_requests_with_one_key_make_one_notification() -> None:
    _, token = make_api_client("racer")
    barrier = threading.Barrier(2)
    codes: list[int] = []
    bodies: list[dict] = []  # type: ignore[type-arg]
    replayed: list[bool] = []

    def send() -> None:
        api = APIClient()
        api.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
        barrier.wait()
        response = post(api, BODY, key="same-key")
        codes.append(response.status_code)
        bodies.append(response.json())
        replayed.append(response.headers.get("Idempotent-Replayed") == "true")
        connection.close()

    threads = [threading.Thread(target=send) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert Notification.objects.count() == 1
    # The second waits for the first's transaction and replays its answer: no 409 for a race.
    assert codes == [202, 202]
    ids = {b["id"] for b in bodies}
    assert ids == {str(Notification.objects.get().pk)}
    assert sorted(replayed) == [False, True]


class HeldAccept:
    """Holds the first request of a thread inside its accept transaction, right after its key's
    insert, until released."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, token: str) -> None:
        from notifications.services.intake import idempotency

        self.token, self.entered, self.release = token, threading.Event(), threading.Event()
        self.response = None
        original = idempotency.insert_or_nothing
        first = threading.Lock()

        def held(*args, **kwargs):  # type: ignore[no-untyped-def]
            inserted = original(*args, **kwargs)
            if first.acquire(blocking=False):
                self.entered.set()
                self.release.wait(timeout=20)
            return inserted

        monkeypatch.setattr(idempotency, "insert_or_nothing", held)
        self.thread = threading.Thread(target=self._send)

    def _send(self) -> None:
        try:
            self.response = post(self.api(), BODY, key="held")
        finally:
            connection.close()

    def api(self) -> APIClient:
        api = APIClient()
        api.credentials(HTTP_AUTHORIZATION=f"Bearer {self.token}")
        return api

    def start(self) -> None:
        self.thread.start()
        assert self.entered.wait(timeout=20), "the first request never reached its transaction"

    def finish(self):  # type: ignore[no-untyped-def]
        self.release.set()
        self.thread.join(timeout=30)
        assert self.response is not None
        return self.response


def backends_waiting_on_a_lock() -> int:
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'")
        return int(cursor.fetchone()[0])


@pytest.mark.django_db(transaction=True)
@override_notifications(ACCEPT_GROUP_SIZE=1)  # as two web processes would: each accepts on its own
def test_a_request_while_the_first_is_inside_its_transaction_waits_for_it_then_replays(monkeypatch: pytest.MonkeyPatch) -> None:
    held = HeldAccept(monkeypatch, make_api_client("racer")[1])
    held.start()
    answers: list = []  # type: ignore[type-arg]

    def second_request() -> None:
        try:
            answers.append(post(held.api(), BODY, key="held"))
        finally:
            connection.close()

    second = threading.Thread(target=second_request)
    second.start()
    # The second is blocked on the key's unique index by the first's open transaction.
    wait_until(lambda: backends_waiting_on_a_lock() >= 1, timeout=10, message="the second request waits on the key")
    assert not answers
    first = held.finish()
    second.join(timeout=30)
    assert first.status_code == 202 and "Idempotent-Replayed" not in first.headers
    [replay] = answers
    assert replay.status_code == 202 and replay.headers["Idempotent-Replayed"] == "true"
    assert replay.json() == first.json() and Notification.objects.count() == 1
    assert IdempotencyKey.objects.get(key="held").state == "completed"


def test_a_replay_wins_over_a_request_that_could_no_longer_be_accepted(api: APIClient, client_and_token) -> None:  # type: ignore[no-untyped-def]
    client, _ = client_and_token
    make_recipient(client, "gone", email="gone@example.com")
    body = {"user_id": "gone", "message": "hello"}
    first = post(api, body, key="k-gone")
    assert api.delete("/api/v1/recipients/gone").status_code == 204
    again = post(api, body, key="k-gone")
    assert again.status_code == 202 and again.json() == first.json() and again.headers["Idempotent-Replayed"] == "true"
    assert post(api, body, key="k-new").status_code == 400


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"to": "a@example.com", "message": "x"}, "user_id"),
        ({"user_id": "u1", "to": "a@example.com"}, "message"),
        ({**BODY, "channel": "pigeon"}, "channel"),
        ({**BODY, "to": "not-an-email"}, "to"),
        ({**BODY, "channel": "sms", "to": "555-1234"}, "to"),
        ({**BODY, "channel": "webhook", "to": "ftp://example.com/x"}, "to"),
        ({"user_id": "nobody", "message": "x"}, "to"),
        ({**BODY, "metadata": ["not", "an", "object"]}, "metadata"),
        ({**BODY, "priority": "urgent"}, "priority"),
        ({**BODY, "send_at": "next tuesday"}, "send_at"),
        ({**BODY, "message": "x" * (64 * 1024 + 1)}, "message"),
        ({**BODY, "metadata": {"order": "a\u0000b"}}, "metadata"),
        ({**BODY, "metadata": {"blob": "x" * (16 * 1024)}}, "metadata"),
        ({**BODY, "subject": "Hi\r\nBcc: all@example.com"}, "subject"),
        ({**BODY, "sned_at": "2030-01-01T00:00:00Z"}, "sned_at"),
        ({**BODY, "channel": "push", "to": "token with spaces"}, "to"),
    ],
)
def test_invalid_requests_are_400_naming_the_field(api: APIClient, body: dict, field: str) -> None:  # type: ignore[type-arg]
    response = post(api, body)
    assert response.status_code == 400, response.content
    error = response.json()["error"]
    assert error["field"] == field and error["message"]
    assert Notification.objects.count() == 0


def test_an_idempotency_key_longer_than_255_is_400_naming_the_header(api: APIClient) -> None:
    response = post(api, BODY, key="k" * 256)
    assert response.status_code == 400, response.content
    assert response.json()["error"]["field"] == "Idempotency-Key"
    assert post(api, BODY, key="k" * 255).status_code == 202
    assert Notification.objects.count() == 1


def test_a_too_deeply_nested_body_is_400_not_500(api: APIClient) -> None:
    response = api.post(URL, data="[" * 100_000 + "]" * 100_000, content_type="application/json")
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "parse_error"


@override_settings(DATA_UPLOAD_MAX_MEMORY_SIZE=1000)
def test_a_body_over_the_upload_limit_is_413_in_the_error_shape(api: APIClient) -> None:
    response = post(api, {**BODY, "message": "x" * 2000})
    assert response.status_code == 413
    assert response.json()["error"]["code"] == "request_too_large"
    assert Notification.objects.count() == 0


def test_a_client_over_its_rate_is_429_with_retry_after(api: APIClient, monkeypatch: pytest.MonkeyPatch) -> None:
    from notifications.api.auth import ApiClientRateThrottle

    monkeypatch.setattr(ApiClientRateThrottle, "rate", "2/min", raising=False)
    assert [api.get(URL).status_code for _ in range(2)] == [200, 200]
    throttled = api.get(URL)
    assert throttled.status_code == 429
    assert 0 < int(throttled.headers["Retry-After"]) <= 60
    assert throttled.json()["error"]["code"] == "throttled"
    # The budget is per client: another client is not slowed by this one.
    _, other_token = make_api_client("other")
    other = APIClient()
    other.credentials(HTTP_AUTHORIZATION=f"Bearer {other_token}")
    assert other.get(URL).status_code == 200


def test_a_body_that_is_not_json_is_400(api: APIClient) -> None:
    response = api.post(URL, data="{not json", content_type="application/json")
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "parse_error"


def test_a_json_array_body_is_400(api: APIClient) -> None:
    assert post(api, [BODY]).status_code == 400


def test_stored_recipient_address_is_used_unless_to_is_given(api: APIClient, client_and_token) -> None:  # type: ignore[no-untyped-def]
    make_recipient(client_and_token[0], "u7", email="stored@example.com", phone="+14155550123")
    stored = post(api, {"user_id": "u7", "message": "hi"}).json()
    sms = post(api, {"user_id": "u7", "message": "hi", "channel": "sms"}).json()
    override = post(api, {"user_id": "u7", "message": "hi", "to": "other@example.com"}).json()
    assert Notification.objects.get(pk=stored["id"]).address == "stored@example.com"
    assert Notification.objects.get(pk=sms["id"]).address == "+14155550123"
    assert Notification.objects.get(pk=override["id"]).address == "other@example.com"


def test_anonymous_and_bad_tokens_get_401(db: None) -> None:
    anonymous = APIClient()
    refused = anonymous.post(URL, BODY, format="json")
    assert refused.status_code == 401 and refused.headers["WWW-Authenticate"].startswith("Bearer")
    assert refused.json()["error"]["code"] == "not_authenticated"
    assert anonymous.get(URL).status_code == 401
    anonymous.credentials(HTTP_AUTHORIZATION="Bearer ntf_wrong")
    wrong = anonymous.get(URL)
    assert wrong.status_code == 401 and wrong.json()["error"]["code"] == "authentication_failed"


def test_token_scheme_is_accepted_and_revoked_clients_are_refused(client_and_token) -> None:  # type: ignore[no-untyped-def]
    from notifications.services import api_client_revoke

    client, token = client_and_token
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Token {token}")
    assert api.get(URL).status_code == 200
    api_client_revoke(client=client)
    assert api.get(URL).status_code == 401


def test_a_token_seen_valid_is_not_read_again_for_a_few_seconds(client_and_token, remembering_tokens) -> None:  # type: ignore[no-untyped-def]
    from django.test.utils import CaptureQueriesContext

    from notifications.models import ApiClient

    from .fakes import override_notifications

    client, token = client_and_token
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")

    def client_reads() -> int:
        with CaptureQueriesContext(connection) as queries:
            assert api.get(URL).status_code == 200
        return sum(ApiClient._meta.db_table in q["sql"] for q in queries.captured_queries)

    assert client_reads() == 1
    assert client_reads() == 0  # remembered (API_TOKEN_CACHE_SECONDS)
    # Revoked by another process (no service call here): this one keeps the token for those
    # seconds; with the cache off the revocation holds at once.
    ApiClient.objects.filter(pk=client.pk).update(is_active=False)
    assert api.get(URL).status_code == 200
    with override_notifications(API_TOKEN_CACHE_SECONDS=0):
        assert api.get(URL).status_code == 401
    # A wrong token is never remembered: each guess is read and counted.
    api.credentials(HTTP_AUTHORIZATION="Bearer ntf_wrong")
    assert [api.get(URL).status_code for _ in range(2)] == [401, 401]


def test_clients_see_only_their_own_notifications(api: APIClient) -> None:
    mine = post(api, BODY).json()["id"]
    _, other_token = make_api_client("other")
    other = APIClient()
    other.credentials(HTTP_AUTHORIZATION=f"Bearer {other_token}")
    theirs = post(other, BODY).json()["id"]
    assert other.get(f"{URL}/{mine}").status_code == 404
    assert other.post(f"{URL}/{mine}/cancel").status_code == 404
    listed = [n["id"] for n in api.get(URL).json()["results"]]
    assert listed == [mine] and theirs not in listed
    # The same idempotency key is scoped per client.
    assert post(api, BODY, key="shared").json()["id"] != post(other, BODY, key="shared").json()["id"]


def test_read_one_includes_its_attempts(api: APIClient) -> None:
    created = post(api, BODY).json()
    response = api.get(f"{URL}/{created['id']}")
    assert response.status_code == 200
    body = response.json()
    assert body["id"] == created["id"] and body["to"] == "ann@example.com" and body["attempts"] == []
    assert api.get(f"{URL}/{uuid.uuid4()}").status_code == 404
    assert api.get(f"{URL}/not-a-uuid").status_code == 404


def test_list_filters_and_paginates_newest_first(api: APIClient) -> None:
    ids = [post(api, {**BODY, "user_id": f"u{i}", "channel": "email"}).json()["id"] for i in range(5)]
    sms = post(api, {**BODY, "user_id": "u-sms", "channel": "sms", "to": "+14155550123"}).json()["id"]
    page = api.get(URL, {"page_size": 2}).json()
    assert [n["id"] for n in page["results"]] == [sms, ids[4]]
    second = api.get(page["next"]).json()
    assert [n["id"] for n in second["results"]] == [ids[3], ids[2]]
    assert [n["id"] for n in api.get(URL, {"channel": "sms"}).json()["results"]] == [sms]
    assert [n["id"] for n in api.get(URL, {"user_id": "u1"}).json()["results"]] == [ids[1]]
    assert len(api.get(URL, {"status": "queued"}).json()["results"]) == 6
    assert api.get(URL, {"status": "delivered"}).json()["results"] == []
    future = (timezone.now() + timedelta(days=1)).isoformat()
    assert api.get(URL, {"created_after": future}).json()["results"] == []
    assert len(api.get(URL, {"created_before": future}).json()["results"]) == 6
    past = (timezone.now() - timedelta(days=1)).isoformat()
    assert api.get(URL, {"created_before": past}).json()["results"] == []
    assert len(api.get(URL, {"created_after": past, "channel": "email"}).json()["results"]) == 5
    assert api.get(URL, {"status": "bogus"}).status_code == 400


def test_cancel_before_sending_then_409_once_finished(api: APIClient) -> None:
    created = post(api, BODY).json()
    response = api.post(f"{URL}/{created['id']}/cancel")
    assert response.status_code == 200 and response.json()["status"] == "cancelled"
    again = api.post(f"{URL}/{created['id']}/cancel")
    assert again.status_code == 409 and again.json()["error"]["code"] == "invalid_transition"
    sending = post(api, BODY).json()["id"]
    Notification.objects.filter(pk=sending).update(status=Status.SENDING)
    assert api.post(f"{URL}/{sending}/cancel").status_code == 409


def test_batch_accepts_each_item_with_its_own_key(api: APIClient) -> None:
    items = [{**BODY, "idempotency_key": "b-1"}, {**BODY, "to": "bad"}, {**BODY, "idempotency_key": "b-1"}]
    response = api.post(f"{URL}/batch", {"notifications": items}, format="json")
    assert response.status_code == 202
    results = response.json()["results"]
    assert [r["status"] for r in results] == [202, 400, 202]
    assert results[0]["body"]["id"] == results[2]["body"]["id"]
    assert results[1]["error"]["field"] == "to"
    assert Notification.objects.count() == 1
