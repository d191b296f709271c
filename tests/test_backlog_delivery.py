"""Workers batch whatever backlog they find (issue #23): a message's claim also takes other due
notifications of its queue, in priority and due order and in turns by client, and the messages that
named them find nothing to do. Real PostgreSQL and RabbitMQ, Dramatiq workers in this process, a
local SMTP server counting what is really sent."""

from __future__ import annotations

import io
import json
import threading
import time
from collections import Counter, OrderedDict
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import dramatiq
import pytest
from django.db import connection, transaction
from django.db.models import F
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from opentelemetry.trace import SpanKind
from rest_framework.test import APIClient

from notifications import services
from notifications.models import ApiClient, DeliveryAttempt, Notification, Recipient, Status
from notifications.services.delivery import backlog
from notifications.services.delivery import send as delivery
from notifications.services.records import outbox

from .factories import make_api_client, make_recipient
from .fakes import LocalSmtpServer, override_notifications, smtp_server_fixture  # noqa: F401  (fixture)
from .helpers import wait_until
from .test_tracing import json_log, named, spans  # noqa: F401  (fixtures)

pytestmark = pytest.mark.django_db(transaction=True)

# The claims' sizes, not the rate limiter's pacing (tests/test_fair_delivery.py, test_batch_delivery.py).
UNLIMITED = "email=100000/s"


@pytest.fixture(autouse=True)
def fresh_pace(monkeypatch: pytest.MonkeyPatch) -> None:
    """No send pace measured and no channel paused yet in this process: each test starts alike."""
    monkeypatch.setattr(delivery, "_send_seconds", {})
    monkeypatch.setattr(backlog, "_paused_until", {})


@pytest.fixture
def no_publish(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """The delivery messages accepts would publish, kept here instead (no worker in these tests)."""
    published: list[str] = []
    monkeypatch.setattr(
        outbox,
        "delivery_message_send",
        lambda *, notification_ids, priority, delay_seconds=0.0, carriers=None: published.extend(notification_ids),
    )
    yield published


def accept_singles(client: ApiClient, count: int, *, prefix: str, priority: str = "high") -> list[str]:
    """``count`` emails, each its own notification_accept call (its own message), as the API makes them."""
    ids = []
    for index in range(count):
        payload = {"user_id": f"{prefix}{index}", "message": "hi", "to": f"{prefix}{index}@example.com", "priority": priority}
        ids.append(
            services.notification_accept(
                client=client,
                request=services.NotificationRequest(**payload),
                idempotency_key=f"{prefix}-{index}",
                fingerprint=services.request_fingerprint(payload),
            ).notification_id
        )
    return ids


def waited(ids: list[str], seconds: float = 5.0) -> None:
    """Make ``ids`` a backlog: due ``seconds`` earlier than accepted, as if they had waited that long."""
    Notification.objects.filter(pk__in=ids).update(next_attempt_at=F("next_attempt_at") - timedelta(seconds=seconds))


def claims_of(ids: list[str]) -> int:
    """How many claims sent ``ids``: every attempt of one claim starts at the claim's one timestamp."""
    return DeliveryAttempt.objects.filter(notification_id__in=ids).values("started_at").distinct().count()


def recipients(smtp: LocalSmtpServer) -> list[str]:
    return [mail.rcpt_tos[0] for mail in smtp.received]


def workers(broker: dramatiq.Broker, *, count: int = 1, threads: int = 2) -> list[dramatiq.Worker]:
    started = [dramatiq.Worker(broker, worker_threads=threads, worker_timeout=100) for _ in range(count)]
    for worker in started:
        worker.start()
    return started


def delivered(ids: list[str]) -> bool:
    return Notification.objects.filter(pk__in=ids, status=Status.DELIVERED).count() == len(ids)


def test_a_backlog_of_single_accepts_is_sent_in_claims_of_many(broker: dramatiq.Broker, smtp_server: LocalSmtpServer) -> None:
    client, _ = make_api_client()
    ids = accept_singles(client, 120, prefix="s")  # 120 messages of one id, no worker yet
    waited(ids)
    with override_notifications(RATE_LIMITS=UNLIMITED):
        running = workers(broker)
        try:
            wait_until(lambda: delivered(ids), timeout=60, message="the backlog delivered")
        finally:
            for worker in running:
                worker.stop()
    assert sorted(recipients(smtp_server)) == sorted(f"s{n}@example.com" for n in range(120))
    # One claim a message would be 120; a backlog claim takes up to DELIVERY_BATCH_SIZE at a time
    # (a few at first, until this process has measured how long a send takes).
    assert claims_of(ids) <= 12, claims_of(ids)
    assert set(Counter(DeliveryAttempt.objects.values_list("notification_id", flat=True)).values()) == {1}


def test_a_claim_sends_high_before_bulk_and_the_earliest_due_first(no_publish: list[str], smtp_server: LocalSmtpServer) -> None:
    client, _ = make_api_client()
    bulk = accept_singles(client, 3, prefix="bulk", priority="bulk")
    high = accept_singles(client, 3, prefix="high")
    own = accept_singles(client, 1, prefix="own", priority="bulk")[0]
    # Due 30, 10 and 20 s ago (bulk), 15, 25 and 5 s ago (high); the message's own 2 s ago.
    for pk, seconds in zip([*bulk, *high, own], [30, 10, 20, 15, 25, 5, 2], strict=True):
        waited([pk], seconds)
    delivery._send_seconds["email"] = 0.001  # a fast channel: a claim takes a whole batch
    outcomes = services.notifications_deliver(notification_ids=[own], backlog_priority="bulk")
    assert {pk: outcome.outcome for pk, outcome in outcomes.items()} == dict.fromkeys([*bulk, *high, own], "delivered")
    assert claims_of([*bulk, *high, own]) == 1
    assert recipients(smtp_server) == [
        "high1@example.com", "high0@example.com", "high2@example.com",
        "bulk0@example.com", "bulk2@example.com", "bulk1@example.com", "own0@example.com",
    ]  # fmt: skip


def test_a_high_message_takes_no_bulk_and_nothing_due_only_just_now(no_publish: list[str], smtp_server: LocalSmtpServer) -> None:
    client, _ = make_api_client()
    bulk = accept_singles(client, 2, prefix="bulk", priority="bulk")
    high = accept_singles(client, 2, prefix="high")
    fresh = accept_singles(client, 1, prefix="fresh")  # its message is on its way: not a backlog
    waited([*bulk, *high])
    delivery._send_seconds["email"] = 0.001
    services.notifications_deliver(notification_ids=[high[0]], backlog_priority="high")
    assert sorted(recipients(smtp_server)) == ["high0@example.com", "high1@example.com"]
    assert not Notification.objects.filter(pk__in=[*bulk, *fresh], status=Status.DELIVERED).exists()


def test_another_clients_single_notification_is_not_behind_a_clients_backlog(
    broker: dramatiq.Broker, smtp_server: LocalSmtpServer
) -> None:
    a, _ = make_api_client("a")
    b, _ = make_api_client("b")
    backlog_ids = accept_singles(a, 300, prefix="a")
    (single,) = accept_singles(b, 1, prefix="b")  # its message is behind A's 300
    waited([*backlog_ids, single])
    with override_notifications(RATE_LIMITS=UNLIMITED):  # fairness under a rate limit: test_fair_delivery.py
        running = workers(broker)
        try:
            wait_until(lambda: delivered([*backlog_ids, single]), timeout=90, message="both clients' notifications delivered")
        finally:
            for worker in running:
                worker.stop()
    order = recipients(smtp_server)
    # In turns by client: B's one notification is in the first claims, not after A's 300.
    assert order.index("b0@example.com") < 10, order.index("b0@example.com")
    assert len(order) == 301


def backlog_sent_by_one_claim(smtp_server: LocalSmtpServer, count: int) -> list[str]:
    """``count`` single accepts waiting as a backlog, all sent by the claim of the first one's message."""
    client, _ = make_api_client()
    ids = accept_singles(client, count, prefix="m")
    waited(ids)
    delivery._send_seconds["email"] = 0.001
    services.notifications_deliver(notification_ids=[ids[0]], backlog_priority="high")
    assert len(smtp_server.received) == count and delivered(ids)
    return ids


def test_a_message_whose_ids_another_claim_took_costs_one_read_and_sends_nothing_twice(
    no_publish: list[str], smtp_server: LocalSmtpServer
) -> None:
    ids = backlog_sent_by_one_claim(smtp_server, 30)
    with CaptureQueriesContext(connection) as queries:
        outcomes = services.notifications_deliver(notification_ids=[ids[7]], backlog_priority="high")
    assert [q["sql"].split()[0].upper() for q in queries.captured_queries] == ["SELECT"]
    assert outcomes[ids[7]].outcome == "skipped"
    assert len(smtp_server.received) == 30


def ms_ago(seconds: float) -> float:
    return (time.time() - seconds) * 1000


@pytest.mark.parametrize("claimed_in", ["this process", "another process"])
def test_a_message_published_before_a_backlog_claim_took_its_row_makes_no_statement(
    no_publish: list[str], smtp_server: LocalSmtpServer, monkeypatch: pytest.MonkeyPatch, claimed_in: str
) -> None:
    ids = backlog_sent_by_one_claim(smtp_server, 30)
    if claimed_in == "another process":
        monkeypatch.setattr(backlog, "_local_claims", OrderedDict())  # only Redis knows of the claim
    # Its message, published (as accepts publish) 10 s before the claim: the claim answered for it.
    with CaptureQueriesContext(connection) as queries:
        outcomes = services.notifications_deliver(notification_ids=[ids[7]], backlog_priority="high", published_ms=ms_ago(10))
    assert queries.captured_queries == []
    assert outcomes[ids[7]].outcome == "skipped"
    assert len(smtp_server.received) == 30


def test_a_message_published_after_the_backlog_claim_of_its_row_is_delivered(
    no_publish: list[str], smtp_server: LocalSmtpServer
) -> None:
    """A retry, or a message coming back: published after the claim that took its row before, it
    is not one that claim answered for."""
    client, _ = make_api_client()
    ids = accept_singles(client, 10, prefix="m")
    waited(ids)
    delivery._send_seconds["email"] = 0.001
    services.notifications_deliver(notification_ids=[ids[0]], backlog_priority="high")
    # The send of ids[3] failed for now: it is due again, and its retry's message is published now.
    Notification.objects.filter(pk=ids[3]).update(status=Status.RETRYING, next_attempt_at=timezone.now())
    outcomes = services.notifications_deliver(notification_ids=[ids[3]], backlog_priority="high", published_ms=ms_ago(0))
    assert outcomes[ids[3]].outcome == "delivered"
    assert recipients(smtp_server).count("m3@example.com") == 2


def test_backlog_rows_a_failed_chunk_gave_back_are_delivered_by_their_own_messages(
    no_publish: list[str], smtp_server: LocalSmtpServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    client, _ = make_api_client()
    ids = accept_singles(client, 10, prefix="f")
    waited(ids)
    delivery._send_seconds["email"] = 0.001
    real_send, calls = delivery.notification_send, []

    def send_then_fail(*args: Any) -> Any:
        calls.append(1)
        if len(calls) == 3:
            raise RuntimeError("the worker died here")  # an error nobody modelled, mid-chunk
        return real_send(*args)

    monkeypatch.setattr(delivery, "notification_send", send_then_fail)
    with pytest.raises(RuntimeError):
        services.notifications_deliver(notification_ids=[ids[0]], backlog_priority="high")
    monkeypatch.setattr(delivery, "notification_send", real_send)
    given_back = list(Notification.objects.filter(pk__in=ids, status=Status.QUEUED).values_list("pk", flat=True))
    assert len(given_back) == 7  # two sent, one in the send that failed (the sweeper's), seven never tried
    # Their claim noted them for their messages, then took the notes back: the first of their
    # messages delivers its row (and, as a backlog claim, the six others).
    outcomes = services.notifications_deliver(
        notification_ids=[str(given_back[0])], backlog_priority="high", published_ms=ms_ago(10)
    )
    assert {outcomes[str(pk)].outcome for pk in given_back} == {"delivered"}
    assert delivered([str(pk) for pk in given_back])


def test_a_worker_goes_on_taking_a_backlog_bigger_than_one_claim(no_publish: list[str], smtp_server: LocalSmtpServer) -> None:
    client, _ = make_api_client()
    ids = accept_singles(client, 23, prefix="g")
    waited(ids)
    delivery._send_seconds["email"] = 0.001
    with override_notifications(DELIVERY_BATCH_SIZE=5, RATE_LIMITS=UNLIMITED):
        outcomes = services.notifications_deliver(notification_ids=[ids[0]], backlog_priority="high")
    # One message: its claim of five, then more claims of five while they come back full.
    assert delivered(ids) and {outcomes[pk].outcome for pk in ids} == {"delivered"}
    assert sorted(Counter(DeliveryAttempt.objects.values_list("started_at", flat=True)).values()) == [3, 5, 5, 5, 5]


def test_two_workers_racing_over_a_backlog_send_each_notification_once(
    broker: dramatiq.Broker, smtp_server: LocalSmtpServer
) -> None:
    client, _ = make_api_client()
    ids = accept_singles(client, 300, prefix="r")
    waited(ids)
    # No rate limit to pace them: eight threads claim as fast as they can.
    with override_notifications(RATE_LIMITS=UNLIMITED):
        running = workers(broker, count=2, threads=4)
        try:
            wait_until(lambda: delivered(ids), timeout=90, message="the backlog delivered")
        finally:
            for worker in running:
                worker.stop()
    assert Counter(recipients(smtp_server)) == Counter({f"r{n}@example.com": 1 for n in range(300)})
    assert set(Counter(DeliveryAttempt.objects.values_list("notification_id", flat=True)).values()) == {1}
    assert claims_of(ids) <= 40, claims_of(ids)


def test_a_backlog_row_whose_recipient_opted_out_since_accept_is_suppressed_without_an_attempt(
    no_publish: list[str], smtp_server: LocalSmtpServer
) -> None:
    client, _ = make_api_client()
    make_recipient(client, "o1", email="o1@example.com")
    ids = accept_singles(client, 3, prefix="o")
    waited(ids)
    Recipient.objects.filter(client=client, user_id="o1").update(preferences={"channels": {"email": False}})
    delivery._send_seconds["email"] = 0.001
    outcomes = services.notifications_deliver(notification_ids=[ids[0]], backlog_priority="high")
    assert {pk: o.outcome for pk, o in outcomes.items()} == {ids[0]: "delivered", ids[1]: "suppressed", ids[2]: "delivered"}
    assert sorted(recipients(smtp_server)) == ["o0@example.com", "o2@example.com"]
    opted_out = Notification.objects.get(pk=ids[1])
    assert (opted_out.status, opted_out.attempt_count) == (Status.SUPPRESSED, 0)
    assert not DeliveryAttempt.objects.filter(notification_id=ids[1]).exists()


def test_a_notification_claimed_beside_another_requests_message_is_sent_in_its_own_trace(
    api: APIClient,
    broker: dramatiq.Broker,
    smtp_server: LocalSmtpServer,
    spans: Any,  # noqa: F811  (the fixture imported above)
    json_log: io.StringIO,  # noqa: F811
) -> None:
    ids = []
    for user in ("t0", "t1"):
        response = api.post(
            "/api/v1/notifications", {"user_id": user, "to": f"{user}@example.com", "message": "hi"}, format="json"
        )
        assert response.status_code == 202
        ids.append(response.json()["id"])
    waited(ids)
    (worker,) = workers(broker, threads=1)  # one thread: the first message's claim takes the second's row
    try:
        wait_until(lambda: delivered(ids) and len(named(spans, "notification.deliver")) == 2, timeout=20)
    finally:
        worker.stop()
    assert claims_of(ids) == 1
    first, second = (Notification.objects.get(pk=pk) for pk in ids)
    sends = {span.attributes["notification.id"]: span for span in named(spans, "notification.send_email")}
    delivers = {span.attributes["notification.id"]: span for span in named(spans, "notification.deliver")}
    # The first is sent under its own message, as always.
    assert sends[ids[0]].parent.span_id == delivers[ids[0]].context.span_id
    assert format(sends[ids[0]].context.trace_id, "032x") == first.trace_id
    # The second, claimed beside it, in its own request's trace: a child of its request's span,
    # linked to the message that carried the claim.
    request_spans = {format(s.context.trace_id, "032x"): s for s in spans.get_finished_spans() if s.kind == SpanKind.SERVER}
    assert format(sends[ids[1]].context.trace_id, "032x") == second.trace_id != first.trace_id
    assert sends[ids[1]].parent.span_id == request_spans[second.trace_id].context.span_id
    assert [link.context.span_id for link in sends[ids[1]].links] == [delivers[ids[0]].context.span_id]
    lines = [json.loads(line) for line in json_log.getvalue().splitlines()]
    logged = {line["notification_id"]: line["otelTraceID"] for line in lines if line["message"].startswith("delivered")}
    assert logged == {ids[0]: first.trace_id, ids[1]: second.trace_id}


@pytest.mark.django_db(transaction=False)
def test_the_embedded_default_claims_only_a_messages_own_ids(no_publish: list[str], smtp_server: LocalSmtpServer) -> None:
    client, _ = make_api_client()
    ids = accept_singles(client, 3, prefix="e")
    waited(ids)
    delivery._send_seconds["email"] = 0.001
    services.notifications_deliver(notification_ids=[ids[0]], backlog_priority="high")
    # SQLite has no FOR UPDATE SKIP LOCKED: each message sends its own; PostgreSQL takes the backlog.
    sent = 1 if connection.vendor == "sqlite" else 3
    assert sorted(recipients(smtp_server)) == [f"e{n}@example.com" for n in range(sent)]


class RowLock:
    """Another transaction holding ``pks`` locked (as the publisher marking a row enqueued does
    for a moment, just after the publish a worker may already be taking), until ``release``."""

    def __init__(self, pks: list[str]) -> None:
        self.locked, self.released = threading.Event(), threading.Event()
        self.thread = threading.Thread(target=self._hold, args=(pks,), daemon=True)

    def _hold(self, pks: list[str]) -> None:
        try:
            with transaction.atomic():
                list(Notification.objects.select_for_update().filter(pk__in=pks))
                self.locked.set()
                self.released.wait(timeout=30)
        finally:
            connection.close()

    def __enter__(self) -> RowLock:
        self.thread.start()
        assert self.locked.wait(timeout=10), "the rows were never locked"
        return self

    def __exit__(self, *exc: object) -> None:
        self.released.set()
        self.thread.join(timeout=10)


def backends_waiting_on_a_lock() -> int:
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'")
        return int(cursor.fetchone()[0])


@pytest.mark.parametrize(
    ("count", "backlog_priority"), [(1, "high"), (3, None)], ids=["one id with a backlog claim", "a batch message"]
)
def test_a_messages_own_row_locked_for_a_moment_is_waited_for_not_left_for_the_sweeper(
    no_publish: list[str], smtp_server: LocalSmtpServer, count: int, backlog_priority: str | None
) -> None:
    client, _ = make_api_client()
    ids = accept_singles(client, count, prefix="l")
    outcomes: dict[str, Any] = {}

    def deliver() -> None:
        try:
            outcomes.update(services.notifications_deliver(notification_ids=ids, backlog_priority=backlog_priority))
        finally:
            connection.close()

    with RowLock([ids[0]]):
        worker_thread = threading.Thread(target=deliver, daemon=True)
        worker_thread.start()
        # Its claim steps over the locked row (SKIP LOCKED), then waits for it rather than leave it.
        wait_until(lambda: backends_waiting_on_a_lock() >= 1 or not worker_thread.is_alive(), timeout=20, message="claimed")
        assert worker_thread.is_alive(), f"finished without waiting for the locked row: {outcomes}"
    worker_thread.join(timeout=20)
    assert {pk: outcome.outcome for pk, outcome in outcomes.items()} == dict.fromkeys(ids, "delivered")
    assert delivered(ids) and len(smtp_server.received) == count
