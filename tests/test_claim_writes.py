"""What a send costs PostgreSQL (issue #23): a backlog claim's plan does not hang on the
statistics of a burst of accepts, and the tables a send writes twice carry no index another index
already leads with. Real PostgreSQL."""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from notifications.models import DeliveryAttempt, Notification
from notifications.models import notifications as notification_model
from notifications.models.backlog import BacklogClaim
from notifications.services.records import outbox

from .factories import make_api_client
from .test_backlog_delivery import accept_singles, waited

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def no_publish(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(outbox, "delivery_message_send", lambda **kwargs: None)


def backlog_of(count: int) -> list[str]:
    """``count`` single accepts of one client, due five seconds ago: a backlog."""
    client, _ = make_api_client()
    ids = accept_singles(client, count, prefix="b")
    waited(ids)
    return ids


def claim_statement(monkeypatch: pytest.MonkeyPatch, *, limit: int) -> tuple[str, list[Any]]:
    """The statement a worker's claim of the backlog alone runs (with its attempts), not run."""
    captured: dict[str, Any] = {}

    def capture(model: Any, sql: str, params: list[Any]) -> list[Any]:
        captured.update(sql=sql, params=params)
        return []

    monkeypatch.setattr(notification_model, "rows_with_models", capture)
    claim = BacklogClaim(channel="email", priorities=("high",), limit=limit, due_before=timezone.now())
    Notification.claim_for_delivery([], now=timezone.now(), backlog=claim)
    return captured["sql"], captured["params"]


def plan_nodes(plan: dict[str, Any]) -> list[dict[str, Any]]:
    return [plan, *(node for child in plan.get("Plans", []) for node in plan_nodes(child))]


def test_a_backlog_claims_plan_does_not_compare_every_candidate_with_every_pending_row(
    no_publish: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Rows accepted a moment ago and never analyzed: the statistics of a burst of accepts. With a
    # status filter on the locked side, the planner counted a few pending rows and compared each of
    # the claim's 400 candidates with all of them (80,000 comparisons for 50 rows).
    backlog_of(300)
    sql, params = claim_statement(monkeypatch, limit=50)
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(f"EXPLAIN (ANALYZE, FORMAT JSON) {sql}", params)
        found = cursor.fetchone()[0]
        (plan,) = json.loads(found) if isinstance(found, str) else found
        transaction.set_rollback(True)  # EXPLAIN ANALYZE ran the claim: taken back
    nodes = plan_nodes(plan["Plan"])
    compared = sum(node.get("Rows Removed by Join Filter", 0) for node in nodes)
    claimed = next(node for node in nodes if node.get("Operation") == "Update")["Actual Rows"]
    assert claimed == 50
    assert compared <= 300, f"{compared} rows compared and dropped by a join filter to claim {claimed}"


def redundant_indexes(table: str) -> list[str]:
    """The indexes of ``table`` whose columns lead another index's: every write of a row writes
    them again for nothing. Partial and expression indexes aside."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT c.relname, i.indkey::text FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid "
            "WHERE i.indrelid = %s::regclass AND i.indpred IS NULL AND i.indexprs IS NULL AND NOT i.indisunique",
            [table],
        )
        plain = [(name, keys.split()) for name, keys in cursor.fetchall()]
        cursor.execute(
            "SELECT c.relname, i.indkey::text FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid "
            "WHERE i.indrelid = %s::regclass AND i.indpred IS NULL AND i.indexprs IS NULL",
            [table],
        )
        every = [(name, keys.split()) for name, keys in cursor.fetchall()]
    return sorted(
        name
        for name, keys in plain
        if any(other != name and len(other_keys) > len(keys) and other_keys[: len(keys)] == keys for other, other_keys in every)
    )


@pytest.mark.parametrize("model", [Notification, DeliveryAttempt], ids=["notifications", "attempts"])
def test_a_table_a_send_writes_has_no_index_another_index_leads_with(model: Any) -> None:
    assert redundant_indexes(model._meta.db_table) == []


def test_a_records_plan_finds_its_rows_by_key_not_among_every_row_in_sending(
    no_publish: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    # 300 rows claimed and not yet recorded, as in a drain: with ``status = 'sending'`` as an index
    # condition, the planner drove the record of five from the status index and compared each of
    # the 300 with each of the five.
    ids = backlog_of(300)
    claimed_at = timezone.now()
    Notification.objects.filter(pk__in=ids).update(status="sending", claimed_at=claimed_at)
    with CaptureQueriesContext(connection) as queries, transaction.atomic():
        Notification.deliveries_finish(dict.fromkeys(ids[:5], "provider-id"), claimed_at=claimed_at, delivered_at=timezone.now())
        transaction.set_rollback(True)
    (record,) = [query["sql"] for query in queries.captured_queries if "UPDATE" in query["sql"]]
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(f"EXPLAIN (ANALYZE, FORMAT JSON) {record}")
        found = cursor.fetchone()[0]
        (plan,) = json.loads(found) if isinstance(found, str) else found
        transaction.set_rollback(True)
    nodes = plan_nodes(plan["Plan"])
    looked_at = sum(node.get("Rows Removed by Join Filter", 0) + node.get("Rows Removed by Filter", 0) for node in nodes)
    assert next(node for node in nodes if node.get("Operation") == "Update")["Actual Rows"] == 5
    assert looked_at <= 5, f"{looked_at} rows looked at and dropped to record 5"
