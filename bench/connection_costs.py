"""What the database connections' hot paths cost in-process (issue #37: public APIs of Django and
psycopg only): a worker message's connection handling and reads, a web request's, and the
prepared per-message read alone, then the first two with Django's CONN_HEALTH_CHECKS on;
microseconds a cycle (median of ROUNDS rounds of CYCLES) and health checks (``SELECT 1``) a cycle. Real PostgreSQL; run it on two trees in turn
to compare them (docs/performance.md). pytest-django makes the database (test_claims_costs):

    env -u BROKER_URL -u REDIS_URL DATABASE_URL=postgres://postgres@127.0.0.1:5432/claims_costs \\
      .venv/bin/python -m pytest bench/connection_costs.py -q -s -p no:randomly -p no:cacheprovider --create-db

It runs on the code before issue #37 too (8ae3b80): only entry points both have."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any

import pytest
from django.core import signals
from django.db import close_old_connections, connection
from django.http import HttpResponse
from django.test import RequestFactory

from notifications import services
from notifications.api.middleware import ApiRequestMiddleware
from notifications.connections import WorkerConnectionsMiddleware
from notifications.models import Notification
from notifications.selectors import notifications_pending_delivery
from tests.factories import make_api_client

ROUNDS = 7
CYCLES = 2_000


def measured(cycle: Callable[[], Any], checks: list[bool]) -> tuple[float, float]:
    """Median microseconds a cycle over ROUNDS rounds, and health checks a cycle."""
    for _ in range(200):  # warm: the statement prepared, the plan cached, the connection open
        cycle()
    checks.clear()
    medians = []
    for _ in range(ROUNDS):
        started = time.perf_counter()
        for _ in range(CYCLES):
            cycle()
        medians.append((time.perf_counter() - started) / CYCLES * 1e6)
    return statistics.median(medians), len(checks) / (ROUNDS * CYCLES)


@pytest.mark.django_db(transaction=True)
def test_connection_costs(monkeypatch: pytest.MonkeyPatch) -> None:
    client, _ = make_api_client("bench")
    request = services.NotificationRequest(user_id="u1", message="hello", to="ann@example.com")
    accepted = services.notification_accept(client=client, request=request, idempotency_key="k", fingerprint="f")
    ids = [accepted.notification_id]
    checks: list[bool] = []
    real = connection.is_usable
    monkeypatch.setattr(connection, "is_usable", lambda: checks.append(True) or real())

    middleware = WorkerConnectionsMiddleware()

    def message() -> None:
        # A message whose notification was sent already: its prepared read, then a statement of
        # Django's own cursor (where Django's CONN_HEALTH_CHECKS would check the connection).
        middleware.before_process_message(None, None)
        notifications_pending_delivery(ids)
        Notification.objects.filter(pk__in=ids, status="delivered").exists()
        middleware.after_process_message(None, None)

    served = ApiRequestMiddleware(lambda request: HttpResponse(Notification.objects.filter(pk__in=ids).exists()))
    factory = RequestFactory()

    def web_request() -> None:
        # As a server runs one: Django's signals (with its close_old_connections) and our middleware.
        signals.request_started.send(sender=None, environ={})
        served(factory.get("/healthz"))
        signals.request_finished.send(sender=None)

    def read() -> None:
        notifications_pending_delivery(ids)

    close_old_connections()
    cycles = (("message", message), ("request", web_request), ("read", read))
    results = {name: measured(cycle, checks) for name, cycle in cycles}
    # The plain public way for comparison: Django's CONN_HEALTH_CHECKS on (a new connection reads it).
    monkeypatch.setitem(connection.settings_dict, "CONN_HEALTH_CHECKS", True)
    connection.close()
    results.update({f"{name} with CONN_HEALTH_CHECKS": measured(cycle, checks) for name, cycle in cycles[:2]})
    for name, (micros, per_cycle) in results.items():
        print(f"connection_costs {name}: {micros:.1f} us a cycle, {per_cycle:.3f} health checks a cycle")
