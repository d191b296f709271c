"""Many notifications in the bench's database at once, for the list pages at scale (bench/list_scale.py).

One ``INSERT ... SELECT`` over ``generate_series``: 3 clients (50/30/20%), user ids skewed (the
square of a uniform draw over 100,000 users, so a few users have thousands of rows and most a
handful), channels email 70% / sms 15% / push 10% / webhook 5%, statuses mostly delivered (failed
2%, dead 0.5%, ...), created_at spread over the last 30 days (the default retention; ``days``) in
insertion order, as real rows arrive; a failed or dead one has one of four failure reasons. Columns the generator does not know take their model default, so a
column added to the model needs no change here. Loaded as a bulk load is: the table's indexes
dropped and built again after the insert, then ``VACUUM (ANALYZE)`` as autovacuum would have.
"""

from __future__ import annotations

import time
from typing import Any

STATUS_SHARES = [  # cumulative share of the rows; statuses the model does not have are skipped
    ("delivered", 0.900),
    ("failed", 0.920),
    ("dead", 0.925),
    ("cancelled", 0.940),
    ("suppressed", 0.950),
    ("retrying", 0.960),
    ("queued", 0.980),
    ("accepted", 0.990),
    ("sending", 1.000),
]
CHANNEL_SHARES = [("email", 0.70), ("sms", 0.85), ("push", 0.95), ("webhook", 1.00)]
USERS = 100_000


def _case(shares: list[tuple[str, float]], draw: str, allowed: set[str]) -> str:
    kept = [(value, share) for value, share in shares if value in allowed]
    whens = " ".join(f"WHEN {draw} < {share} THEN '{value}'" for value, share in kept[:-1])
    return f"CASE {whens} ELSE '{kept[-1][0]}' END"


FAILURE_REASONS = ("permanent SMTP 550", "rejected HTTP 400", "timeout", "connection_error")


def generate(rows: int, *, days: int = 30) -> dict[str, Any]:
    """Fill the notifications table with ``rows`` generated rows; returns facts the pages use."""
    from django.db import connection, transaction

    from notifications import services
    from notifications.models import Channel, Notification, Status

    bench = services.api_client_get_or_create(name="bench-http")
    others = [services.api_client_get_or_create(name=name).pk for name in ("shop", "billing")]
    table = Notification._meta.db_table
    statuses = {str(value) for value in Status.values}
    derived = {
        "client_id": f"CASE WHEN g.r_client < 0.5 THEN {bench.pk} WHEN g.r_client < 0.8 THEN {others[0]} ELSE {others[1]} END",
        "user_id": "g.user_id",
        "channel": "g.channel",
        "status": "g.status",
        "created_at": "g.created_at",
        "updated_at": "g.created_at + interval '200 milliseconds'",
        "delivered_at": "CASE WHEN g.status = 'delivered' THEN g.created_at + (0.05 + g.r_time * 0.5) * interval '1 second' END",
        "next_attempt_at": "g.created_at",
        "enqueued_at": "g.created_at",
        "claimed_at": "CASE WHEN g.status IN ('delivered', 'failed', 'dead', 'sending') THEN g.created_at END",
        "attempt_count": "CASE WHEN g.status IN ('failed', 'dead') THEN 5 WHEN g.status IN ('delivered', 'sending') THEN 1 ELSE 0 END",
        "address": (
            "CASE g.channel WHEN 'email' THEN g.user_id || '@example.com' WHEN 'sms' THEN '+1415' || lpad((g.user_number)::text, 7, '0') "
            "WHEN 'push' THEN md5(g.user_id) ELSE 'https://hooks.example.com/' || g.user_id END"
        ),
        "subject": "'Your order ' || g.i || ' has shipped'",
        "message": "'Hello, your order ' || g.i || ' has shipped and arrives on Tuesday.'",
        "priority": "CASE WHEN g.r_time < 0.8 THEN 'high' ELSE 'bulk' END",
        "last_error": "CASE WHEN g.status IN ('failed', 'dead') THEN 'SMTP 550: mailbox unavailable' ELSE '' END",
        "failure_reason": (
            f"CASE WHEN g.status IN ('failed', 'dead') THEN (ARRAY{list(FAILURE_REASONS)!r})[1 + floor(g.r_time * 4)::int] "
            "ELSE '' END"
        ),
        "provider_message_id": "CASE WHEN g.status = 'delivered' THEN 'gen-' || g.i ELSE '' END",
        "trace_id": "md5(g.i::text)",
        "idempotency_key": "'gen-' || g.i",
        "id": "gen_random_uuid()",
    }
    columns, expressions, params = [], [], []
    for model_field in Notification._meta.concrete_fields:
        column = str(model_field.column)
        columns.append(connection.ops.quote_name(column))
        if column in derived:
            expressions.append(derived[column])
        elif model_field.has_default():
            expressions.append("%s")
            params.append(model_field.get_db_prep_save(model_field.get_default(), connection))
        elif model_field.null:
            expressions.append("NULL")
        else:
            raise SystemExit(
                f"bench: the generator knows no value for the new column {table}.{column}; add it to list_scale.generate"
            )
    sql = f"""
        INSERT INTO {table} ({", ".join(columns)})
        SELECT {", ".join(expressions)} FROM (
            SELECT s.i, s.r_client, s.r_time, s.user_number, 'user-' || s.user_number AS user_id,
                {_case(CHANNEL_SHARES, "s.r_channel", {str(c) for c in Channel.values})} AS channel,
                {_case(STATUS_SHARES, "s.r_status", statuses)} AS status,
                now() - interval '{int(days)} days' * (1 - s.i::float / %s) AS created_at
            FROM (
                SELECT i, random() AS r_client, random() AS r_channel, random() AS r_status, random() AS r_time,
                    floor(power(random(), 2) * {USERS})::int AS user_number
                FROM generate_series(1, %s) AS i
            ) AS s
        ) AS g
    """
    started = time.monotonic()
    # A bulk load: the indexes built once afterwards instead of row by row, no per-row foreign-key
    # trigger (the rows are consistent by construction), no wait for the WAL flush.
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(
            "SELECT indexname, indexdef FROM pg_indexes WHERE tablename = %s AND indexname NOT IN "
            "(SELECT conname FROM pg_constraint WHERE conrelid = %s::regclass)",
            [table, table],
        )
        indexes = cursor.fetchall()
        for name, _ in indexes:
            cursor.execute(f'DROP INDEX "{name}"')
        cursor.execute("SET LOCAL synchronous_commit = off")
        cursor.execute("SET LOCAL session_replication_role = replica")
        cursor.execute("SET LOCAL maintenance_work_mem = '256MB'")
        cursor.execute(sql, [*params, rows, rows])
        for _, definition in indexes:
            cursor.execute(definition)
    with connection.cursor() as cursor:
        cursor.execute(f"VACUUM (ANALYZE) {table}")
    elapsed = time.monotonic() - started
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT user_id, count(*) FROM {table} WHERE client_id = %s GROUP BY user_id ORDER BY count(*) DESC LIMIT 1",
            [bench.pk],
        )
        heavy_user, heavy_rows = cursor.fetchone()
        cursor.execute(
            f"WITH users AS (SELECT user_id, count(*) AS n FROM {table} WHERE client_id = %s GROUP BY user_id) "
            "SELECT user_id, n FROM users ORDER BY n, user_id OFFSET (SELECT count(*) / 2 FROM users) LIMIT 1",
            [bench.pk],
        )
        typical_user, typical_rows = cursor.fetchone()
        cursor.execute(
            f"SELECT id, address FROM {table} WHERE client_id = %s AND channel = 'email' "
            "ORDER BY created_at DESC LIMIT 1 OFFSET 1000",
            [bench.pk],
        )
        some_id, some_address = cursor.fetchone()
        cursor.execute(f"SELECT count(*) FROM {table} WHERE address = %s", [some_address])
        address_rows = cursor.fetchone()[0]
    return {
        "seconds": elapsed,
        "heavy_user": heavy_user,
        "heavy_rows": heavy_rows,
        "typical_user": typical_user,
        "typical_rows": typical_rows,
        "id": str(some_id),
        "address": some_address,
        "address_rows": address_rows,
    }
