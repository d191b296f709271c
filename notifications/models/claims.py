"""A delivery claim and its attempts in one statement (PostgreSQL): the claim's ``UPDATE ...
RETURNING`` as a data-modifying CTE, and an ``INSERT`` of each claimed row's attempt from it.

As one statement in autocommit the claim commits as it returns. As two statements in a transaction
it stayed open while the worker read the claimed rows and sent the insert; meanwhile it held the
rows it had claimed and those a backlog claim had locked and rechecked (models/backlog.py), so
other workers' claims and the records of their deliveries queued behind a Python thread.
"""

from __future__ import annotations

import functools
from datetime import datetime
from typing import Any, TypeVar

from django.db import connection, models

from .attempts import DeliveryAttempt

M = TypeVar("M", bound=models.Model)

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


def rows_as_models(model: type[M], sql: str, params: list[Any]) -> list[M]:
    """Run ``sql``, whose columns are ``model``'s concrete fields in their order and then any
    others, and return one instance a row, the other columns set on it as attributes.

    What ``Model.objects.raw`` makes of it, without its per-query resolution of columns to fields
    and per-row converter pipeline: a claim builds fifty at a time, and that was a tenth of a
    worker's time in a drain."""
    width, converters = _model_readers(model)
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        extra = [column[0] for column in cursor.description[width:]]
        rows = cursor.fetchall()
    made = []
    for row in rows:
        values = list(row[:width])
        for index, convert, expression in converters:
            values[index] = convert(values[index], expression, connection)
        instance = model.from_db(connection.alias, None, values)  # type: ignore[arg-type]
        for name, value in zip(extra, row[width:], strict=True):
            setattr(instance, name, value)
        made.append(instance)
    return made


@functools.cache
def _model_readers(model: type[models.Model]) -> tuple[int, list[tuple[int, Any, Any]]]:
    """How many concrete fields ``model`` has, and the database converters of those that have one
    (a JSON field's decoding), with the column expression each is given."""
    fields = model._meta.concrete_fields
    converters = []
    for index, field in enumerate(fields):
        column = field.get_col(model._meta.db_table)
        for convert in [*connection.ops.get_db_converters(column), *field.get_db_converters(connection)]:
            converters.append((index, convert, column))
    return len(fields), converters
