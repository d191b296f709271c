"""A delivery claim and its attempts in one statement (PostgreSQL): the claim's ``UPDATE ...
RETURNING`` as a data-modifying CTE, and an ``INSERT`` of each claimed row's attempt from it.

As one statement in autocommit the claim commits as it returns. As two statements in a transaction
it stayed open while the worker read the claimed rows and sent the insert; meanwhile it held the
rows it had claimed and those a backlog claim had locked (models/backlog.py), so
other workers' claims and the records of their deliveries queued behind a Python thread.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.db import connection

from .attempts import DeliveryAttempt

# The attempt's columns taken from its claimed row; every other column gets its field's default.
_FROM_CLAIMED = {"notification": "id", "number": "last_attempt_number + 1", "channel": "channel"}


def claim_with_attempts_sql(*, prefix: str, update: str, params: list[Any], now: datetime) -> tuple[str, list[Any]]:
    """``prefix`` (the claim's own CTEs, or "") and ``update`` (its ``UPDATE ... RETURNING``) with
    ``params``, made one statement that also inserts an attempt started at ``now`` for each row it
    claims; it returns the claimed rows, each with its attempt's id as ``attempt_id``."""
    quote = connection.ops.quote_name
    table = quote(DeliveryAttempt._meta.db_table)
    columns, values, extra = [], [], []
    for field in DeliveryAttempt._meta.concrete_fields:
        if field.primary_key:
            continue
        columns.append(quote(str(field.column)))
        if field.name in _FROM_CLAIMED:
            values.append(f"claimed.{_FROM_CLAIMED[field.name]}")
            continue
        value = now if field.name == "started_at" else field.get_default()
        # Cast: a bare parameter in an INSERT's SELECT list is text to PostgreSQL.
        values.append(f"CAST(%s AS {field.db_type(connection)})")
        extra.append(field.get_db_prep_save(value, connection))
    joiner = ", " if prefix else "WITH "
    sql = (
        f"{prefix.rstrip()}{joiner}claimed AS ({update}), "
        f"attempt AS (INSERT INTO {table} ({', '.join(columns)}) SELECT {', '.join(values)} FROM claimed "
        f"RETURNING id, notification_id) "
        f"SELECT claimed.*, attempt.id AS attempt_id FROM claimed JOIN attempt ON attempt.notification_id = claimed.id"
    )
    return sql, [*params, *extra]
