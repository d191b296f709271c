"""The SQL of the hot paths, counted: one accept is one write transaction, one delivery two (its
claim one statement). A statement added to either path fails here, before it shows in a benchmark."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from psycopg.pq import TransactionStatus

from notifications import connections, services
from notifications.models import AttemptOutcome, DeliveryAttempt, IdempotencyKey, Notification, OutcomeCount, Status, Suppression
from notifications.selectors import notifications_pending_delivery
from notifications.services.delivery import send as delivery

from .factories import make_api_client, make_recipient
from .fakes import LocalSmtpServer, smtp_server_fixture  # noqa: F401  (fixture)

pytestmark = pytest.mark.django_db(transaction=True)


def statements(queries: CaptureQueriesContext) -> list[str]:
    """The first word of each statement, BEGIN and COMMIT included (Django logs them)."""
    return [q["sql"].split()[0].upper() for q in queries.captured_queries]


def writes(queries: CaptureQueriesContext) -> list[str]:
    return [kind for kind in statements(queries) if kind in ("INSERT", "UPDATE", "DELETE")]


@pytest.fixture
def no_publish(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """Count the delivery messages published after commit without a broker round trip."""
    published: list[str] = []
    monkeypatch.setattr(
        services.records.outbox,
        "delivery_message_send",
        lambda *, notification_ids, priority, delay_seconds=0.0, carriers=None: published.extend(notification_ids),
    )
    yield published


@pytest.mark.parametrize("stored", ["opted out", "suppressed"])
def test_one_read_of_a_single_accept_sees_both_its_recipients_consent_and_its_address_suppression(
    no_publish: list[str], stored: str
) -> None:
    client, _ = make_api_client()
    if stored == "opted out":
        make_recipient(client, "u1", email="old@example.com")
        services.recipient_preferences_replace(client=client, user_id="u1", channels={"email": False}, categories={})
    else:
        Suppression.objects.create(client=client, channel="email", address="ann@example.com", reason="bounced")
    request = services.NotificationRequest(user_id="u1", message="hello", to="ann@example.com")
    with CaptureQueriesContext(connection) as queries:
        result = services.notification_accept(client=client, request=request, idempotency_key="k1", fingerprint="f1")
    assert statements(queries)[:2] == ["SELECT", "SELECT"] and statements(queries)[2] != "SELECT"
    notification = Notification.objects.get(pk=result.notification_id)
    assert notification.status == Status.SUPPRESSED
    assert notification.suppressed_reason == ("preference" if stored == "opted out" else "bounced")
    assert no_publish == []


def test_one_accept_with_an_address_is_two_inserts_in_one_transaction(no_publish: list[str]) -> None:
    client, _ = make_api_client()
    request = services.NotificationRequest(user_id="u1", message="hello", to="ann@example.com")
    with CaptureQueriesContext(connection) as queries:
        result = services.notification_accept(client=client, request=request, idempotency_key="k1", fingerprint="f1")
    # Two reads: the recipient's consent (preferences, quiet hours) and the address's suppression
    # in one statement (two index probes), then the category; then one write transaction.
    assert statements(queries) == ["SELECT", "SELECT", "BEGIN", "INSERT", "INSERT", "COMMIT"], queries.captured_queries
    assert no_publish == [result.notification_id]
    notification = Notification.objects.get(pk=result.notification_id)
    assert (notification.status, notification.enqueued_at is not None) == (Status.QUEUED, True)
    assert IdempotencyKey.objects.get(key="k1").response_body == result.body


def test_one_accept_to_a_stored_recipient_reads_the_recipient_once(no_publish: list[str]) -> None:
    client, _ = make_api_client()
    make_recipient(client, "u1", email="ann@example.com")
    request = services.NotificationRequest(user_id="u1", message="hello")
    with CaptureQueriesContext(connection) as queries:
        services.notification_accept(client=client, request=request, idempotency_key="k2", fingerprint="f2")
    assert statements(queries) == ["SELECT", "SELECT", "SELECT", "BEGIN", "INSERT", "INSERT", "COMMIT"]


def test_a_replay_is_one_conflicting_insert_and_one_read(no_publish: list[str]) -> None:
    client, _ = make_api_client()
    request = services.NotificationRequest(user_id="u1", message="hello", to="ann@example.com")
    first = services.notification_accept(client=client, request=request, idempotency_key="k3", fingerprint="f3")
    with CaptureQueriesContext(connection) as queries:
        again = services.notification_accept(client=client, request=request, idempotency_key="k3", fingerprint="f3")
    assert again.replayed and again.body == first.body
    assert writes(queries) == ["INSERT", "UPDATE"]  # the insert that conflicts; the expired-key check
    assert Notification.objects.count() == 1 and no_publish == [first.notification_id]


def test_one_delivery_is_a_read_a_claim_of_one_statement_and_a_record_of_two(
    no_publish: list[str], smtp_server: LocalSmtpServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    client, _ = make_api_client()
    request = services.NotificationRequest(user_id="u1", message="hello", to="ann@example.com")
    accepted = services.notification_accept(client=client, request=request, idempotency_key="k4", fingerprint="f4")
    # The claim has committed before the provider is called: no transaction of it is left open
    # (holding the row's lock) while the send runs.
    open_during_send: list[bool] = []
    real_send = delivery.notification_send
    monkeypatch.setattr(
        delivery,
        "notification_send",
        lambda *args: (
            open_during_send.append(connection.connection.info.transaction_status != TransactionStatus.IDLE) or real_send(*args)
        ),
    )
    with CaptureQueriesContext(connection) as queries:
        outcome = services.notification_deliver(notification_id=accepted.notification_id)
    assert outcome.outcome == "delivered"
    # The pending check; the claim, one statement in autocommit (WITH claimed AS (UPDATE ...
    # RETURNING), attempt AS (INSERT ...) SELECT ...); the outcome (attempt, row). The row's UPDATE
    # carries the dashboard's counter in the same statement (WITH changed AS (UPDATE ...), counted
    # AS (INSERT ... ON CONFLICT DO UPDATE) SELECT ...): no third statement.
    assert statements(queries) == ["SELECT", "WITH", "BEGIN", "UPDATE", "WITH", "COMMIT"], queries.captured_queries
    assert open_during_send == [False]
    assert list(OutcomeCount.objects.values_list("channel", "status", "count")) == [("email", Status.DELIVERED, 1)]
    assert len(smtp_server.received) == 1
    notification = Notification.objects.get(pk=accepted.notification_id)
    assert (notification.status, notification.attempt_count) == (Status.DELIVERED, 1)
    assert list(DeliveryAttempt.objects.values_list("number", "outcome")) == [(1, AttemptOutcome.DELIVERED)]


def test_a_worker_thread_sends_its_emails_over_one_kept_smtp_connection_and_reconnects_when_dropped(
    smtp_server: LocalSmtpServer,
) -> None:
    from notifications.channels import OutgoingMessage
    from notifications.channels.email import DjangoEmailProvider

    provider = DjangoEmailProvider()

    def send(n: int) -> None:
        provider.send(
            OutgoingMessage(notification_id=f"n-{n}", channel="email", address=f"u{n}@example.com", subject="s", body="b")
        )

    for n in range(3):
        send(n)
    assert len({mail.peer for mail in smtp_server.received}) == 1
    # The server closes the idle session: the next send goes out on a fresh connection.
    connection, reused = provider._connections.get()
    assert reused
    connection.connection.sock.shutdown(socket.SHUT_RDWR)
    send(3)
    assert len(smtp_server.received) == 4
    assert len({mail.peer for mail in smtp_server.received}) == 2


def test_the_read_every_delivery_message_makes_is_planned_once_per_connection(no_publish: list[str]) -> None:
    # A backlog's messages mostly find their notification sent already: this read is all they cost.
    client, _ = make_api_client()
    request = services.NotificationRequest(user_id="u1", message="hello", to="ann@example.com")
    accepted = services.notification_accept(client=client, request=request, idempotency_key="k5", fingerprint="f5")
    for _ in range(3):
        assert notifications_pending_delivery([accepted.notification_id])
    with connection.cursor() as cursor:
        cursor.execute("SELECT statement, generic_plans, custom_plans FROM pg_prepared_statements")
        prepared = cursor.fetchall()
    # Three runs of the one generic plan (plan_cache_mode, platform/settings.py): none planned at its bind.
    assert [(generic, custom) for statement, generic, custom in prepared if "notifications_notification" in statement] == [
        (3, 0)
    ], prepared


def test_a_worker_thread_opens_its_database_connection_at_boot_and_a_failure_waits_for_its_first_message(
    caplog: pytest.LogCaptureFixture,
) -> None:
    from notifications.connections import WorkerConnectionsMiddleware

    seen: dict[str, Any] = {}

    def boot(port: str | None = None) -> None:
        # A thread of its own, as a worker thread is: Django's connections are per thread.
        try:
            if port is not None:
                connection.settings_dict = {**connection.settings_dict, "PORT": port}
            WorkerConnectionsMiddleware().after_worker_thread_boot(None, None)
            seen[port or "open"] = connection.connection is not None and connection.is_usable()
        except BaseException as exc:  # reported below
            seen["raised"] = exc
        finally:
            connection.close()

    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        closed = str(probe.getsockname()[1])
    for port in (None, closed):
        thread = threading.Thread(target=boot, args=(port,))
        thread.start()
        thread.join(timeout=30)
    assert "raised" not in seen, seen
    assert seen["open"] is True  # connected before any message
    # Nothing listens there: logged, and the connection left to the first message to open.
    assert seen[closed] is False
    assert any("could not open its connections at start" in r.getMessage() for r in caplog.records)


def test_a_worker_thread_checks_its_database_connection_again_only_after_an_error(monkeypatch: pytest.MonkeyPatch) -> None:
    from notifications.connections import WorkerConnectionsMiddleware

    checks: list[bool] = []
    real = connection.is_usable
    monkeypatch.setattr(connection, "is_usable", lambda: checks.append(True) or real())
    middleware = WorkerConnectionsMiddleware()
    for _ in range(3):  # three messages, each reading once
        middleware.before_process_message(None, None)
        Notification.objects.exists()
        middleware.after_process_message(None, None)
    assert checks == []  # no SELECT 1 round trip before each message
    connection.errors_occurred = True  # a message whose statement failed
    middleware.after_process_message(None, None)
    assert checks == [True] and connection.connection is not None


def test_a_connection_that_served_the_last_request_is_not_checked_again_at_the_next(monkeypatch: pytest.MonkeyPatch) -> None:
    # As a server runs a request: the signals (Django's handlers and ours), then the middleware.
    from django.core import signals
    from django.db import close_old_connections
    from django.http import HttpResponse
    from django.test import RequestFactory

    from notifications.api.middleware import ApiRequestMiddleware

    checks: list[bool] = []
    real = connection.is_usable
    monkeypatch.setattr(connection, "is_usable", lambda: checks.append(True) or real())
    connection.close()  # a fresh one: no error an earlier test left on it, no age near CONN_MAX_AGE
    Notification.objects.exists()
    served = ApiRequestMiddleware(lambda request: HttpResponse(str(Notification.objects.exists())))

    def request() -> None:
        signals.request_finished.send(sender=None)
        close_old_connections()  # Django's request_started handler (the test client disconnects it)
        signals.request_started.send(sender=None, environ={})
        served(RequestFactory().get("/healthz"))

    request()
    assert checks == []  # no SELECT 1 round trip before the request's first statement
    # Idle for longer (a database restarted meanwhile, say): checked as Django checks it.
    request()
    monkeypatch.setattr(connections, "HEALTHY_FOR_SECONDS", 0.0)  # as if it had been idle since
    close_old_connections()
    served(RequestFactory().get("/healthz"))
    assert checks == [True]


def test_a_loops_connection_broken_while_idle_is_replaced_before_its_next_statement(monkeypatch: pytest.MonkeyPatch) -> None:
    # A sweep or an event after a while (the database restarted meanwhile, say): with Django's
    # CONN_HEALTH_CHECKS off, connections.py checks the connection and opens a new one.
    Notification.objects.exists()
    broken = connection.connection.info.backend_pid

    def terminate() -> None:
        try:
            with connection.cursor() as cursor:  # this thread's own connection
                cursor.execute("SELECT pg_terminate_backend(%s)", [broken])
        finally:
            connection.close()

    thread = threading.Thread(target=terminate)
    thread.start()
    thread.join(timeout=30)
    monkeypatch.setattr(connections, "HEALTHY_FOR_SECONDS", 0.0)  # idle since
    connections.database_connections_refresh()
    assert Notification.objects.exists() is False  # no OperationalError: a new connection
    assert connection.connection.info.backend_pid != broken


def test_one_redis_client_serves_every_thread() -> None:
    from notifications.connections import redis_client

    seen: list[Any] = []
    threads = [threading.Thread(target=lambda: seen.append(redis_client())) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=10)
    assert len(seen) == 3 and seen[0] is not None
    assert all(client is seen[0] for client in seen)
    assert seen[0].ping() is True
