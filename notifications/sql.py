"""SQL the ORM cannot say in one statement, written once for PostgreSQL and SQLite alike."""

from __future__ import annotations

from typing import Any

from django.db import connection, models


def insert_or_nothing(model: type[models.Model], values: dict[str, Any], *, conflict_fields: tuple[str, ...]) -> bool:
    """``INSERT ... ON CONFLICT (conflict_fields) DO NOTHING``: True when the row went in.

    One round trip where ``get_or_create`` takes two or three and ``bulk_create(ignore_conflicts=True)``
    cannot say whether the row was inserted. A concurrent insert of the same key waits for the
    other transaction to end, then reports the conflict."""
    return bool(insert_rows_or_nothing(model, [values], conflict_fields=conflict_fields, returning=str(model._meta.pk.column)))


def insert_rows_or_nothing(
    model: type[models.Model], rows: list[dict[str, Any]], *, conflict_fields: tuple[str, ...], returning: str
) -> set[Any]:
    """One multi-row ``INSERT ... ON CONFLICT DO NOTHING RETURNING <returning>``: the values of
    ``returning`` of the rows that went in (a row whose key a concurrent transaction holds waits
    for it, then is left out). ``rows`` are by column name and prepared by the model's own fields,
    so JSON and datetimes are stored exactly as the ORM would."""
    if not rows:
        return set()
    meta = model._meta
    fields = {field.column: field for field in meta.concrete_fields}
    columns = list(rows[0])
    quote = connection.ops.quote_name
    placeholders = "(" + ", ".join(["%s"] * len(columns)) + ")"
    params = [fields[column].get_db_prep_save(row[column], connection) for row in rows for column in columns]
    sql = (
        f"INSERT INTO {quote(meta.db_table)} ({', '.join(quote(c) for c in columns)}) "
        f"VALUES {', '.join([placeholders] * len(rows))} "
        f"ON CONFLICT ({', '.join(quote(c) for c in conflict_fields)}) DO NOTHING RETURNING {quote(returning)}"
    )
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return {row[0] for row in cursor.fetchall()}
