"""The rows a backlog claim takes beside a message's own: other due notifications of its queue, in
priority order, oldest due first and in turns by client, as SQL for Notification.claim_for_delivery."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db import connection


@dataclass(frozen=True)
class BacklogClaim:
    """What a claim takes beside its message's ids: at most ``limit`` pending notifications of
    ``channel`` whose priority is one of ``priorities`` (the first before the next), due at
    ``due_before`` or earlier."""

    channel: str
    priorities: tuple[str, ...]
    limit: int
    due_before: datetime


# Each client's oldest due rows ranked, several times what one claim takes: claims running at the
# same moment step around each other's locked rows (SKIP LOCKED) onto the next ones instead of
# finding none. With 3, the sixteen threads of two workers starting on one client's backlog at once
# (5 rows a claim before a pace is measured) mostly found every candidate locked and took none.
CANDIDATES_PER_CLAIM = 8


def backlog_rows_sql(*, table: str, pending: Sequence[str], own: list[Any], backlog: BacklogClaim) -> tuple[str, list[Any]]:
    """A ``SELECT id ... FOR UPDATE SKIP LOCKED`` of the rows ``backlog`` takes, not one of ``own``,
    and its parameters (PostgreSQL only: SQLite has neither SKIP LOCKED nor LATERAL).

    Fair between clients as the sweeps are (selectors.due_in_turns): every client's oldest, then
    every client's second oldest, and so on (``row_number() OVER (PARTITION BY client_id ...)``),
    so a client with a backlog of 10,000 takes its share while another client's one notification
    is in the very next claim. Bounded by clients, not by the backlog: the clients with pending
    rows on the channel are found by a skip scan of the partial index ``notif_pending_due`` (one
    probe a client), and each gives its oldest due rows by one more probe a priority. A row locked
    by another claim is stepped over, never waited for.

    The rows it locks are not filtered again here: the claim's UPDATE takes only those still
    pending (it rechecks a row another claim sent meanwhile, as PostgreSQL rechecks its WHERE on a
    row updated since the statement began). A status filter on the locked table's side of the join
    gave the planner, with statistics from before a burst of accepts, "three pending rows": a
    nested loop comparing every candidate with every pending row (400 by 1,000 in a drain of
    bench/email_singles.py, two thirds of each claim's time). Without it the candidates find
    their rows by primary key, or by one hash, whatever the statistics say."""
    status_in = f"IN ({', '.join(['%s'] * len(pending))})"
    ranks = ", ".join(["(%s, %s)"] * len(backlog.priorities))
    not_own = f"AND y.id NOT IN ({', '.join(['%s'] * len(own))})" if own else ""
    per_client = backlog.limit * CANDIDATES_PER_CLAIM
    # ORDER BY the whole index, not client_id alone: with client_id alone the planner takes the
    # client_id index and filters the client's whole history (row goal of LIMIT 1).
    index_order = "channel, client_id, priority, next_attempt_at"
    sql = f"""
        WITH RECURSIVE clients(client_id) AS (
            (SELECT client_id FROM {table} WHERE status {status_in} AND channel = %s ORDER BY {index_order} LIMIT 1)
            UNION ALL
            SELECT (
                SELECT n.client_id FROM {table} n
                WHERE n.status {status_in} AND n.channel = %s AND n.client_id > clients.client_id
                ORDER BY {", ".join(f"n.{column}" for column in index_order.split(", "))} LIMIT 1
            ) FROM clients WHERE clients.client_id IS NOT NULL
        )
        SELECT x.id FROM {table} x JOIN (
            SELECT c.id, c.rank, c.due,
                   row_number() OVER (PARTITION BY c.rank, c.client_id ORDER BY c.due, c.id) AS turn
            FROM clients k
            CROSS JOIN (VALUES {ranks}) AS p(rank, priority)
            CROSS JOIN LATERAL (
                SELECT y.id, y.client_id, p.rank, y.next_attempt_at AS due FROM {table} y
                WHERE y.status {status_in} AND y.channel = %s AND y.client_id = k.client_id
                  AND y.priority = p.priority AND y.next_attempt_at <= %s {not_own}
                ORDER BY y.next_attempt_at LIMIT %s
            ) c
            WHERE k.client_id IS NOT NULL
        ) r ON r.id = x.id
        ORDER BY r.rank, r.turn, r.due, x.id
        LIMIT %s
        FOR UPDATE OF x SKIP LOCKED"""
    stamp = connection.ops.adapt_datetimefield_value(backlog.due_before)
    params: list[Any] = [
        *pending,
        backlog.channel,
        *pending,
        backlog.channel,
        *[value for rank, priority in enumerate(backlog.priorities) for value in (rank, priority)],
        *pending,
        backlog.channel,
        stamp,
        *own,
        per_client,
        backlog.limit,
    ]
    return sql, params
