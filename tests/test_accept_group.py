"""Group commit: single POST /notifications arriving at the same moment in one web process are
written in one statement and published in one round trip, each keeping its own answer, its own
idempotency key and its own trace. Real requests through the API (threads of this process, each
with its own database connection), the real PostgreSQL and RabbitMQ.

To make a group deterministic, the first request's turn (a group of one, accepted alone) waits
until the others are queued behind it; they then form the next group."""

from __future__ import annotations

import io
import json
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

import dramatiq
import pytest
from django.db import connection
from opentelemetry import trace
from rest_framework.test import APIClient

from notifications.conf import HIGH_QUEUE
from notifications.models import IdempotencyKey, Notification, Status
from notifications.services.intake import accept_group
from notifications.tracing import TRACE_OPTION, TRACES_OPTION

from .factories import make_api_client, make_template
from .helpers import wait_until
from .test_tracing import json_log, spans  # noqa: F401  (fixtures)

pytestmark = pytest.mark.django_db(transaction=True)

URL = "/api/v1/notifications"


def held_in_turn(
    monkeypatch: pytest.MonkeyPatch, module: Any, name: str, waiting: Callable[[], int]
) -> tuple[list[int], Callable[[int], None]]:
    """Wrap ``module.name`` (called with a list: a group, a write's groups) to record each list's
    size; ``hold(n)``: the next call with a list of one waits until ``waiting()`` reaches ``n``, so
    those ``n`` are taken together by the call after it."""
    sizes: list[int] = []
    held: list[int] = []
    real = getattr(module, name)

    def recording(taken: list[Any]) -> None:
        sizes.append(len(taken))
        if held and len(taken) == 1:
            wanted = held.pop()
            wait_until(lambda: waiting() >= wanted, timeout=10, message=f"{wanted} queued")
        real(taken)

    monkeypatch.setattr(module, name, recording)
    return sizes, held.append


@pytest.fixture
def groups(monkeypatch: pytest.MonkeyPatch) -> tuple[list[int], Callable[[int], None]]:
    """The sizes of the groups written, and ``hold(n)``: the next group of one waits until ``n``
    accepts are queued behind it, so those ``n`` are written together."""
    return held_in_turn(monkeypatch, accept_group, "_group_accept", lambda: accept_group.groups.waiting)


def post_together(token: str | list[str], bodies: list[tuple[str, dict[str, Any]]]) -> list[Any]:
    """POST each (key, body) from its own thread, all at once, as the client of ``token`` (or of
    the token in the same place of a list); the responses in order."""
    responses: list[Any] = [None] * len(bodies)
    start = threading.Barrier(len(bodies))
    tokens = [token] * len(bodies) if isinstance(token, str) else token

    def send(index: int) -> None:
        api = APIClient()
        api.credentials(HTTP_AUTHORIZATION=f"Bearer {tokens[index]}")
        key, body = bodies[index]
        headers = {"HTTP_IDEMPOTENCY_KEY": key} if key else {}
        start.wait()
        try:
            responses[index] = api.post(URL, body, format="json", **headers)
        finally:
            connection.close()  # this thread's connection, or the test database cannot be dropped

    threads = [threading.Thread(target=send, args=(index,)) for index in range(len(bodies))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert all(not thread.is_alive() for thread in threads)
    return responses


def body(n: int, **fields: str) -> dict[str, Any]:
    return {"user_id": f"u{n}", "message": f"hello {n}", "to": f"u{n}@example.com", **fields}


def post_in_thread(token: str, payload: dict[str, Any], answers: list[int]) -> threading.Thread:
    """POST ``payload`` as ``token``'s client from a thread of its own (started); its status goes to ``answers``."""

    def send() -> None:
        api = APIClient()
        api.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
        try:
            answers.append(api.post(URL, payload, format="json").status_code)
        finally:
            connection.close()  # this thread's connection, or the test database cannot be dropped

    thread = threading.Thread(target=send)
    thread.start()
    return thread


def drain(broker: dramatiq.Broker, queue: str) -> list[dramatiq.Message[Any]]:
    messages = []
    while True:
        _, _, raw = broker.channel.basic_get(queue=queue, auto_ack=True)
        if raw is None:
            return messages
        messages.append(dramatiq.Message.decode(raw))


def test_concurrent_accepts_are_written_as_one_group_each_with_its_own_answer_and_message(
    groups: tuple[list[int], Callable[[int], None]], broker: dramatiq.Broker
) -> None:
    sizes, hold = groups
    _, token = make_api_client()
    hold(5)
    responses = post_together(token, [(f"g-{n}", body(n)) for n in range(6)])

    assert [r.status_code for r in responses] == [202] * 6, [r.content for r in responses]
    assert sorted(sizes) == [1, 5]  # the first alone, the five behind it together
    ids = [r.json()["id"] for r in responses]
    assert len(set(ids)) == 6 and [r.json()["idempotency_key"] for r in responses] == [f"g-{n}" for n in range(6)]
    stored = {str(n.pk): n for n in Notification.objects.all()}
    assert set(stored) == set(ids)
    for n, notification_id in enumerate(ids):
        notification = stored[notification_id]
        assert (notification.address, notification.status, notification.enqueued_at is not None) == (
            f"u{n}@example.com",
            Status.QUEUED,
            True,
        )
        assert IdempotencyKey.objects.get(key=f"g-{n}").response_body == responses[n].json()
    # One message for the first, one for the five of the group: each id in one, published together.
    messages = drain(broker, HIGH_QUEUE)
    assert sorted(len(m.args) for m in messages) == [1, 5]
    assert sorted(pk for m in messages for pk in m.args) == sorted(ids)


def test_the_same_key_twice_in_one_group_makes_one_notification_and_the_second_replays(
    groups: tuple[list[int], Callable[[int], None]],
) -> None:
    sizes, hold = groups
    _, token = make_api_client()
    hold(3)
    same = body(1)
    responses = post_together(token, [("other-0", body(0)), ("same", same), ("same", same), ("other-2", body(2))])

    assert [r.status_code for r in responses] == [202] * 4
    assert sorted(sizes) == [1, 3]
    first, second = responses[1], responses[2]
    assert first.json() == second.json()
    assert sorted([first.headers.get("Idempotent-Replayed"), second.headers.get("Idempotent-Replayed")], key=str) == [
        None,
        "true",
    ]
    assert Notification.objects.filter(idempotency_key="same").count() == 1
    assert Notification.objects.count() == 3


def test_a_bad_request_in_a_group_is_its_own_400_and_a_reused_key_with_another_body_its_own_422(
    groups: tuple[list[int], Callable[[int], None]],
) -> None:
    sizes, hold = groups
    client, token = make_api_client()
    stored = APIClient()
    stored.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    assert stored.post(URL, body(9), format="json", HTTP_IDEMPOTENCY_KEY="taken").status_code == 202
    sizes.clear()
    hold(3)
    responses = post_together(
        token,
        [("a", body(0)), ("b", body(1, to="not-an-email")), ("taken", body(9, message="another body")), ("c", body(2))],
    )

    assert [r.status_code for r in responses] == [202, 400, 422, 202], [r.content for r in responses]
    assert sorted(sizes) == [1, 3]
    assert responses[1].json()["error"]["field"] == "to"
    assert set(Notification.objects.values_list("idempotency_key", flat=True)) == {"taken", "a", "c"}


def test_the_same_key_after_a_refused_request_with_another_body_is_accepted_as_its_own(
    groups: tuple[list[int], Callable[[int], None]],
) -> None:
    sizes, hold = groups
    _, token = make_api_client()
    hold(3)
    responses = post_together(
        token, [("lead", body(0)), ("shared", body(1, to="not-an-email")), ("shared", body(2)), ("other", body(3))]
    )
    # The good request is never refused for the bad one: if the bad one came first it is its own
    # 400 and the key went to no one; if the good one came first it took the key and the bad one,
    # another body, is a 422. Exactly as when the two come one after the other.
    codes = [r.status_code for r in responses]
    assert codes[0] == codes[2] == codes[3] == 202 and codes[1] in (400, 422), [r.content for r in responses]
    assert sorted(sizes) == [1, 3]
    assert Notification.objects.get(idempotency_key="shared").address == "u2@example.com"


def test_a_request_that_waits_too_long_for_its_group_is_accepted_on_its_own(monkeypatch: pytest.MonkeyPatch) -> None:
    _, token = make_api_client()
    stuck, released = threading.Event(), threading.Event()
    real = accept_group._group_accept

    def stuck_leader(group: list[Any]) -> None:
        if not stuck.is_set():
            stuck.set()
            released.wait(timeout=20)  # the leader hangs (a lock held elsewhere, a blocked broker)
        real(group)

    monkeypatch.setattr(accept_group, "_group_accept", stuck_leader)
    monkeypatch.setattr(accept_group, "GROUP_WAIT_SECONDS", 0.2)
    answered: list[str] = []

    def leader() -> None:
        api = APIClient()
        api.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
        try:
            answered.append(f"leader {api.post(URL, body(0), format='json', HTTP_IDEMPOTENCY_KEY='slow').status_code}")
        finally:
            connection.close()

    first = threading.Thread(target=leader)
    first.start()
    assert stuck.wait(timeout=10)
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    waited = api.post(URL, body(1), format="json", HTTP_IDEMPOTENCY_KEY="patient")
    answered.append(f"follower {waited.status_code}")
    assert accept_group.groups.waiting == 0  # it left the queue: the stuck group will not take it too
    released.set()
    first.join(timeout=30)
    assert answered == ["follower 202", "leader 202"]
    assert set(Notification.objects.values_list("idempotency_key", flat=True)) == {"slow", "patient"}


def test_each_request_of_a_group_keeps_its_own_trace_to_its_message(
    groups: tuple[list[int], Callable[[int], None]],
    broker: dramatiq.Broker,
    spans: Any,  # noqa: F811  (the fixture imported above)
) -> None:
    sizes, hold = groups
    _, token = make_api_client()
    hold(3)
    responses = post_together(token, [(f"t-{n}", body(n)) for n in range(4)])
    assert [r.status_code for r in responses] == [202] * 4 and sorted(sizes) == [1, 3]

    notifications = {str(n.pk): n for n in Notification.objects.all()}
    request_traces = {
        format(span.context.trace_id, "032x") for span in spans.get_finished_spans() if span.kind == trace.SpanKind.SERVER
    }
    # Four requests, four traces; each notification carries its own request's, not its leader's.
    assert {n.trace_id for n in notifications.values()} == request_traces and len(request_traces) == 4
    carried = {}
    for message in drain(broker, HIGH_QUEUE):
        if len(message.args) == 1:  # the first, alone: its message is in its trace
            carried[message.args[0]] = message.options[TRACE_OPTION]["traceparent"]
        else:  # the group's: no trace of its own (not its leader's), each id's request's
            assert message.options[TRACE_OPTION] == {}
            carried.update({pk: carrier["traceparent"] for pk, carrier in message.options[TRACES_OPTION].items()})
    assert {pk: traceparent.split("-")[1] for pk, traceparent in carried.items()} == {
        pk: n.trace_id for pk, n in notifications.items()
    }


def test_each_notification_of_a_group_is_sent_and_logged_in_its_own_requests_trace(
    groups: tuple[list[int], Callable[[int], None]],
    worker: dramatiq.Worker,
    spans: Any,  # noqa: F811
    json_log: io.StringIO,  # noqa: F811
) -> None:
    sizes, hold = groups
    _, token = make_api_client()
    hold(3)
    responses = post_together(token, [(f"s-{n}", body(n)) for n in range(4)])
    assert [r.status_code for r in responses] == [202] * 4 and sorted(sizes) == [1, 3]
    ids = {r.json()["id"] for r in responses}

    def sends() -> list[Any]:
        return [s for s in spans.get_finished_spans() if s.name == "notification.send_email"]

    def delivers() -> list[Any]:
        return [s for s in spans.get_finished_spans() if s.name == "notification.deliver"]

    # Both messages processed to the end (their consumer spans end after the deliveries are recorded).
    wait_until(lambda: len(sends()) == 4 and len(delivers()) == 2, timeout=20, message="four sends, two messages")
    notifications = {str(n.pk): n for n in Notification.objects.filter(pk__in=ids)}
    assert {n.status for n in notifications.values()} == {Status.DELIVERED}
    by_id = {send.attributes["notification.id"]: send for send in sends()}
    assert {pk: format(send.context.trace_id, "032x") for pk, send in by_id.items()} == {
        pk: n.trace_id for pk, n in notifications.items()
    }
    assert len({n.trace_id for n in notifications.values()}) == 4
    # The group's message is delivered under one consumer span, which links to the three traces;
    # each send of it links back to that span.
    (group_deliver,) = [d for d in delivers() if len(d.links) == 3]
    assert {format(link.context.trace_id, "032x") for link in group_deliver.links} < {n.trace_id for n in notifications.values()}
    grouped = [send for send in by_id.values() if send.links]
    assert len(grouped) == 3 and all(send.links[0].context.span_id == group_deliver.context.span_id for send in grouped)
    lines = [json.loads(line) for line in json_log.getvalue().splitlines()]
    delivered = {line["notification_id"]: line["otelTraceID"] for line in lines if line["message"].startswith("delivered")}
    assert delivered == {pk: n.trace_id for pk, n in notifications.items()}


def test_a_group_whose_write_fails_as_a_whole_is_accepted_request_by_request(
    groups: tuple[list[int], Callable[[int], None]], monkeypatch: pytest.MonkeyPatch
) -> None:
    sizes, hold = groups
    _, token = make_api_client()
    real = accept_group.notification_accept_batch_into
    failures: list[int] = []

    def failing_once(**kwargs: Any) -> Any:
        if not failures:
            failures.append(len(kwargs["items"]))
            raise RuntimeError("the group's statement failed")
        return real(**kwargs)

    monkeypatch.setattr(accept_group, "notification_accept_batch_into", failing_once)
    hold(3)
    responses = post_together(token, [(f"f-{n}", body(n)) for n in range(4)])

    assert failures == [3]  # the group of three failed as a whole...
    assert [r.status_code for r in responses] == [202] * 4  # ...and each of its requests was accepted alone
    assert Notification.objects.count() == 4 and IdempotencyKey.objects.count() == 4


def test_requests_without_a_key_in_one_group_each_get_a_key_of_their_own(
    groups: tuple[list[int], Callable[[int], None]],
) -> None:
    sizes, hold = groups
    _, token = make_api_client()
    hold(3)
    responses = post_together(token, [("", body(n)) for n in range(4)])
    assert [r.status_code for r in responses] == [202] * 4 and sorted(sizes) == [1, 3]
    keys = {r.json()["idempotency_key"] for r in responses}
    assert len(keys) == 4 and "" not in keys and IdempotencyKey.objects.filter(key__in=keys).count() == 4


def test_a_digest_member_is_accepted_alone_never_in_a_group(groups: tuple[list[int], Callable[[int], None]]) -> None:
    sizes, _ = groups
    _, token = make_api_client()
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    make_template("daily", subject="{{ count }} updates", body="{% for item in items %}{{ item.n }} {% endfor %}", html_body="")
    response = api.post(
        URL,
        {
            "user_id": "u1",
            "to": "u1@example.com",
            "template": "daily",
            "data": {"n": 1},
            "digest": {"key": "daily", "window_seconds": 60},
        },
        format="json",
    )
    assert response.status_code == 202, response.content
    assert sizes == []  # no group: it joined its digest under the digest's row lock


def test_a_clients_stalled_group_does_not_hold_another_clients_request(monkeypatch: pytest.MonkeyPatch) -> None:
    _, slow_token = make_api_client("slow-client")
    _, other_token = make_api_client("other-client")
    stalled, released = threading.Event(), threading.Event()
    real = accept_group._group_accept

    def stalling(group: list[Any]) -> None:
        if group[0].client.name == "slow-client":
            stalled.set()
            released.wait(timeout=30)  # a member of it renders for 15 s, say
        real(group)

    monkeypatch.setattr(accept_group, "_group_accept", stalling)
    slow_answer: list[int] = []
    first = post_in_thread(slow_token, body(0), slow_answer)
    try:
        assert stalled.wait(timeout=10)
        other_answer: list[int] = []
        asked = time.monotonic()
        second = post_in_thread(other_token, body(1), other_answer)
        # Answered while the slow client's group is still held: not behind it, and well before
        # GROUP_WAIT_SECONDS (10 s), after which a request behind a stuck leader goes alone.
        second.join(timeout=5)
        assert not second.is_alive() and other_answer == [202]
        assert time.monotonic() - asked < 1.0  # delayed by the other client's render by no more than 1 s
        assert slow_answer == []
    finally:
        released.set()
        first.join(timeout=30)
    assert slow_answer == [202]


def test_a_request_taken_into_a_stuck_group_is_answered_within_the_wait_bound(
    groups: tuple[list[int], Callable[[int], None]], monkeypatch: pytest.MonkeyPatch
) -> None:
    sizes, hold = groups
    _, token = make_api_client()
    taken, released = threading.Event(), threading.Event()
    real = accept_group._group_accept

    def stuck_with_members(group: list[Any]) -> None:
        if len(group) > 1:
            taken.set()
            released.wait(timeout=30)  # the group took its members, then hangs (a blocked broker)
        real(group)

    monkeypatch.setattr(accept_group, "_group_accept", stuck_with_members)
    # Each member's bound runs from its own arrival, so it must outlast the spread of the three
    # arrivals, or a member gives up before the group takes it: on a loaded machine the requests'
    # authentication and throttling alone can spread them over a second.
    monkeypatch.setattr(accept_group, "GROUP_WAIT_SECONDS", 3.0)
    hold(3)
    responses: list[Any] = []
    posting = threading.Thread(target=lambda: responses.extend(post_together(token, [(f"w-{n}", body(n)) for n in range(4)])))
    posting.start()
    try:
        assert taken.wait(timeout=10)
        # The group's leader is its own request, stuck doing the write; the two it took are
        # answered alone once the bound passes, while it still hangs.
        wait_until(
            lambda: Notification.objects.filter(idempotency_key__startswith="w-").count() == 3,
            timeout=10,
            message="the first and the two members taken into the stuck group, written alone",
        )
        assert posting.is_alive()
    finally:
        released.set()
        posting.join(timeout=30)
    assert [r.status_code for r in responses] == [202] * 4
    # Its key kept the stuck group from writing a member a second time.
    assert Notification.objects.count() == 4 and IdempotencyKey.objects.count() == 4


def test_a_failure_after_the_groups_commit_leaves_its_written_members_answered_202(
    groups: tuple[list[int], Callable[[int], None]], monkeypatch: pytest.MonkeyPatch
) -> None:
    from notifications.services.intake import accept_batch

    sizes, hold = groups
    _, token = make_api_client()

    def failing(**kwargs: Any) -> None:
        raise RuntimeError("the read of taken keys failed (the database went away)")

    monkeypatch.setattr(accept_batch, "_answer_taken_keys", failing)
    hold(3)
    responses = post_together(token, [(f"c-{n}", body(n)) for n in range(4)])

    assert sorted(sizes) == [1, 3]
    # Each written by the group's statement: answered from it, new (not replayed), not 503.
    assert [r.status_code for r in responses] == [202] * 4
    assert [r.headers.get("Idempotent-Replayed") for r in responses] == [None] * 4
    assert Notification.objects.count() == 4


def test_each_member_of_a_group_logs_with_its_own_request_id(
    groups: tuple[list[int], Callable[[int], None]],
    json_log: io.StringIO,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from notifications.services.intake import accept as accept_module
    from notifications.services.intake import accept_batch

    sizes, hold = groups
    _, token = make_api_client()
    real_build = accept_module.notification_build

    def logging_build(**kwargs: Any) -> Any:
        logging.getLogger("notifications.services").info("building %s", kwargs["idempotency_key"])
        return real_build(**kwargs)

    monkeypatch.setattr(accept_batch, "notification_build", logging_build)
    hold(3)
    responses = post_together(token, [(f"r-{n}", body(n)) for n in range(4)])
    assert sorted(sizes) == [1, 3]

    request_ids = {f"r-{n}": response["X-Request-ID"] for n, response in enumerate(responses)}
    lines = [json.loads(line) for line in json_log.getvalue().splitlines()]
    logged = {line["message"].split()[1]: line["request_id"] for line in lines if line["message"].startswith("building")}
    # The three of the group (whichever arrived behind the first) built in the leader's thread.
    assert len(logged) == 3 and logged == {key: request_ids[key] for key in logged}
