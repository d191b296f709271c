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
    ``returning`` of the rows that went in, as the model's field gives them (a row whose key a
    concurrent transaction holds waits for it, then is left out). ``rows`` are by column name and
    prepared by the model's own fields, so JSON and datetimes are stored exactly as the ORM would.
    ``conflict_fields=()`` is a bare ``ON CONFLICT DO NOTHING``: any unique index, partial ones too
    (a conflict target would have to repeat a partial index's WHERE clause)."""
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
        f"{_on_conflict(conflict_fields)} DO NOTHING RETURNING {quote(returning)}"
    )
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return returned_values(fields[returning], cursor.fetchall())


def returned_values(field: models.Field[Any, Any], rows: list[tuple[Any, ...]]) -> set[Any]:
    """The first column of ``RETURNING`` rows as ``field``'s Python values. A raw cursor skips the
    ORM's converters: SQLite returns a UUID as its 32-hex string, which equals no ``uuid.UUID``."""
    return {field.to_python(row[0]) for row in rows}


def _on_conflict(conflict_fields: tuple[str, ...]) -> str:
    if not conflict_fields:
        return "ON CONFLICT"
    quote = connection.ops.quote_name
    return f"ON CONFLICT ({', '.join(quote(c) for c in conflict_fields)})"


def insert_many_or_nothing(
    model: type[models.Model], rows: list[dict[str, Any]], *, conflict_fields: tuple[str, ...], returning: str
) -> set[Any]:
    """``insert_rows_or_nothing`` for hundreds of rows. On PostgreSQL one array parameter per
    column that varies (``INSERT ... SELECT * FROM unnest(%s::type[], ...)``) and one plain
    parameter per column that is the same in every row, so the statement has a few dozen
    placeholders whatever the rows: a VALUES list of 500 rows of 30 columns has 15,000, which
    psycopg parses again on every execution (~0.2 s a batch), and each would be prepared on its own.
    Elsewhere (SQLite), the multi-row VALUES."""
    if not rows or connection.vendor != "postgresql":
        return insert_rows_or_nothing(model, rows, conflict_fields=conflict_fields, returning=returning)
    meta = model._meta
    fields = {field.column: field for field in meta.concrete_fields}
    first = rows[0]
    varying = [column for column in first if any(row[column] != first[column] for row in rows)]
    constant = [column for column in first if column not in varying]
    quote = connection.ops.quote_name
    arrays = [[fields[column].get_db_prep_save(row[column], connection) for row in rows] for column in varying]
    scalars = [fields[column].get_db_prep_save(first[column], connection) for column in constant]
    unnest = ", ".join(f"%s::{fields[column].db_type(connection)}[]" for column in varying)
    names = ", ".join(f"v{index}" for index in range(len(varying)))
    select = [f"u.v{index}" for index in range(len(varying))]
    select += [f"%s::{fields[column].db_type(connection)}" for column in constant]
    source = f"unnest({unnest}) AS u({names})" if varying else "(SELECT 1) AS u"
    sql = (
        f"INSERT INTO {quote(meta.db_table)} ({', '.join(quote(c) for c in [*varying, *constant])}) "
        f"SELECT {', '.join(select)} FROM {source} "
        f"{_on_conflict(conflict_fields)} DO NOTHING RETURNING {quote(returning)}"
    )
    with connection.cursor() as cursor:
        # In the text the SELECT list's scalars come before the FROM's arrays.
        cursor.execute(sql, [*scalars, *arrays])
        return returned_values(fields[returning], cursor.fetchall())


def update_rows(
    model: type[models.Model],
    rows: dict[Any, dict[str, Any]],
    *,
    same: dict[str, Any],
    where: dict[str, Any] | None = None,
) -> set[Any]:
    """``UPDATE ... FROM (VALUES ...)``: each row (by primary key) its own values of the fields in
    ``rows``, every row the values in ``same``, only where the fields in ``where`` still have
    those values; returns the primary keys updated (``RETURNING``). One statement for a batch,
    where ``bulk_update`` builds a CASE per field from an ORM expression per row (most of a
    worker's time recording a batch). PostgreSQL and SQLite (3.33+) alike; VALUES' columns are
    ``column1``... on both."""
    if not rows:
        return set()
    meta, quote = model._meta, connection.ops.quote_name
    pk: Any = meta.pk
    table = quote(meta.db_table)
    varying = list(next(iter(rows.values())))

    def field_of(name: str) -> Any:
        return meta.get_field(name)

    def mark(field: Any) -> str:
        # PostgreSQL types VALUES' columns from their first row; SQLite needs (and wants) no cast.
        return f"CAST(%s AS {field.db_type(connection)})" if connection.vendor == "postgresql" else "%s"

    row_marks = "(" + ", ".join(mark(field) for field in [pk, *map(field_of, varying)]) + ")"
    params: list[Any] = []
    for key, values in rows.items():
        params.append(pk.get_db_prep_save(key, connection))
        params.extend(field_of(name).get_db_prep_save(values[name], connection) for name in varying)
    assignments = [f"{quote(field_of(name).column)} = v.column{index + 2}" for index, name in enumerate(varying)]
    same_params = []
    for name, value in same.items():
        assignments.append(f"{quote(field_of(name).column)} = %s")
        same_params.append(field_of(name).get_db_prep_save(value, connection))
    conditions, where_params = [f"{table}.{quote(pk.column)} = v.column1"], []
    for name, value in (where or {}).items():
        conditions.append(f"{table}.{quote(field_of(name).column)} = %s")
        where_params.append(field_of(name).get_db_prep_save(value, connection))
    sql = (
        f"UPDATE {table} SET {', '.join(assignments)} "
        f"FROM (VALUES {', '.join([row_marks] * len(rows))}) AS v "
        f"WHERE {' AND '.join(conditions)} RETURNING {table}.{quote(pk.column)}"
    )
    with connection.cursor() as cursor:
        cursor.execute(sql, [*same_params, *params, *where_params])
        return returned_values(pk, cursor.fetchall())
