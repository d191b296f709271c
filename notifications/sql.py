"""SQL the ORM cannot say in one statement, written once for PostgreSQL and SQLite alike."""

from __future__ import annotations

import datetime
import functools
import json
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from django.db import connection, models, transaction
from django.utils import timezone
from django.utils.functional import Promise


def insert_or_nothing(model: type[models.Model], values: dict[str, Any], *, conflict_fields: tuple[str, ...]) -> bool:
    """``INSERT ... ON CONFLICT (conflict_fields) DO NOTHING``: True when the row went in.

    One round trip where ``get_or_create`` takes two or three and ``bulk_create(ignore_conflicts=True)``
    cannot say whether the row was inserted. A concurrent insert of the same key waits for the
    other transaction to end, then reports the conflict."""
    return bool(insert_rows_or_nothing(model, [values], conflict_fields=conflict_fields, returning=str(model._meta.pk.column)))


def insert_rows_or_nothing(
    model: type[models.Model], rows: list[dict[str, Any]], *, conflict_fields: tuple[str, ...], returning: str | tuple[str, ...]
) -> set[Any]:
    """One multi-row ``INSERT ... ON CONFLICT DO NOTHING RETURNING <returning>``: the values of
    ``returning`` of the rows that went in, as the model's field gives them (a tuple of them when
    ``returning`` names several columns; a row whose key a concurrent transaction holds waits for
    it, then is left out). ``rows`` are by column name and prepared by the model's own fields, so
    JSON and datetimes are stored exactly as the ORM would. ``conflict_fields=()`` is a bare
    ``ON CONFLICT DO NOTHING``: any unique index, partial ones too (a conflict target would have to
    repeat a partial index's WHERE clause)."""
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
        f"{_on_conflict(conflict_fields)} DO NOTHING RETURNING {_columns(returning)}"
    )
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        if isinstance(returning, str):
            return returned_values(fields[returning], cursor.fetchall())
        return {tuple(fields[c].to_python(value) for c, value in zip(returning, row, strict=True)) for row in cursor.fetchall()}


def returned_values(field: models.Field[Any, Any], rows: list[tuple[Any, ...]]) -> set[Any]:
    """The first column of ``RETURNING`` rows as ``field``'s Python values. A raw cursor skips the
    ORM's converters: SQLite returns a UUID as its 32-hex string, which equals no ``uuid.UUID``."""
    return {field.to_python(row[0]) for row in rows}


def _columns(names: str | tuple[str, ...], *, table: str = "") -> str:
    quote = connection.ops.quote_name
    return ", ".join(f"{table}{quote(name)}" for name in ((names,) if isinstance(names, str) else names))


def _on_conflict(conflict_fields: tuple[str, ...]) -> str:
    if not conflict_fields:
        return "ON CONFLICT"
    quote = connection.ops.quote_name
    return f"ON CONFLICT ({', '.join(quote(c) for c in conflict_fields)})"


def insert_many_or_nothing(
    model: type[models.Model], rows: list[dict[str, Any]], *, conflict_fields: tuple[str, ...], returning: str
) -> set[Any]:
    """``insert_rows_or_nothing`` for hundreds of rows. On PostgreSQL the rows travel as one JSON
    parameter (``INSERT ... SELECT ... FROM jsonb_to_recordset(%s)``, see ``_insert_select``), so
    the statement has one placeholder whatever the rows: a VALUES list of 500 rows of 30 columns
    has 15,000, which psycopg parses again on every execution, and each would be prepared on its
    own. Elsewhere (SQLite), the multi-row VALUES."""
    if not rows or connection.vendor != "postgresql":
        return insert_rows_or_nothing(model, rows, conflict_fields=conflict_fields, returning=returning)
    insert, params = _insert_select(model, rows)
    quote = connection.ops.quote_name
    with connection.cursor() as cursor:
        cursor.execute(f"{insert} {_on_conflict(conflict_fields)} DO NOTHING RETURNING {quote(returning)}", params)
        return returned_values({field.column: field for field in model._meta.concrete_fields}[returning], cursor.fetchall())


def insert_claimed(
    claims: tuple[type[models.Model], list[dict[str, Any]], tuple[str, ...], tuple[str, ...]],
    model: type[models.Model],
    rows: list[dict[str, Any]],
    *,
    claimed_by: tuple[str, ...],
) -> set[Any]:
    """Insert the claim rows ``ON CONFLICT DO NOTHING`` and, of ``rows``, those whose claim went
    in (``claimed_by``: their columns holding the claim's ``returning`` values, in order; an
    idempotency key with its client's id, so that the keys of several clients go in one
    statement); returns the primary keys of the rows inserted. ``claims`` is (model, rows,
    conflict_fields, returning).

    On PostgreSQL one statement (the claims' INSERT a data-modifying CTE the rows' INSERT reads),
    so outside a transaction it is one round trip and one commit, atomic as any statement: an
    accept's idempotency keys and their notifications. Elsewhere (SQLite, no INSERT in a WITH)
    two statements in a transaction."""
    claim_model, claim_rows, conflict_fields, returning = claims
    pk: Any = model._meta.pk
    quote = connection.ops.quote_name
    if not rows:
        return set()
    if connection.vendor != "postgresql":
        with transaction.atomic():
            taken = insert_rows_or_nothing(claim_model, claim_rows, conflict_fields=conflict_fields, returning=returning)
            kept = [row for row in rows if tuple(row[column] for column in claimed_by) in taken]
            return insert_rows_or_nothing(model, kept, conflict_fields=(), returning=str(pk.column))
    claim_insert, claim_params = _insert_select(claim_model, claim_rows)
    insert, params = _insert_select(model, rows)
    sql = (
        f"WITH claimed AS ({claim_insert} {_on_conflict(conflict_fields)} DO NOTHING RETURNING {_columns(returning)}) "
        f"{insert} WHERE ({_columns(claimed_by, table='u.')}) IN (SELECT {_columns(returning)} FROM claimed) "
        f"RETURNING {quote(pk.column)}"
    )
    with connection.cursor() as cursor:
        cursor.execute(sql, [*claim_params, *params])
        return returned_values(pk, cursor.fetchall())


def _insert_select(model: type[models.Model], rows: list[dict[str, Any]]) -> tuple[str, list[Any]]:
    """``INSERT INTO table (columns) SELECT columns FROM jsonb_to_recordset(%s) AS u(column type,
    ...)`` and its one parameter (PostgreSQL): the rows as one JSON array, which PostgreSQL casts
    column by column to the table's types (a JSON null is NULL; a jsonb column takes the nested
    value as it is). One ``json.dumps`` instead of an array per column, each element adapted and
    quoted into the statement by psycopg (most of the web's time writing a group of accepts); and
    the statement's text depends only on the columns, so it is made once per set of columns."""
    sql, prepared = _insert_select_shape(model, tuple(rows[0]))
    records = rows
    if prepared:
        records = [{column: prepare(row[column]) for column, prepare in prepared} for row in rows]
    return sql, [json.dumps(records, default=_json_scalar, ensure_ascii=False, separators=(",", ":"))]


# Fields whose values JSON (with _json_scalar) says as the field's get_prep_value would have them
# stored: text, whole numbers, booleans, aware datetimes, UUIDs, JSON. A row of only these is
# dumped as it is; calling get_prep_value on each of its thirty values was most of the time a group
# of accepts took to build its statement.
_SAID_AS_THEY_ARE = (
    models.CharField,
    models.TextField,
    models.IntegerField,
    models.BooleanField,
    models.DateTimeField,
    models.UUIDField,
    models.JSONField,
)


def _said_as_it_is(field: models.Field[Any, Any]) -> bool:
    if isinstance(field, models.ForeignKey):
        return _said_as_it_is(field.target_field)
    return isinstance(field, _SAID_AS_THEY_ARE)


@functools.cache
def _insert_select_shape(model: type[models.Model], columns: tuple[str, ...]) -> tuple[str, list[tuple[str, Any]]]:
    """The statement of _insert_select for ``columns``, and how to prepare each column's value
    when a field of them needs its get_prep_value (none: the rows are dumped as they are)."""
    meta = model._meta
    fields = {str(field.column): field for field in meta.concrete_fields}
    types = _db_types(model)
    quote = connection.ops.quote_name
    prepared = []
    if not all(_said_as_it_is(fields[column]) for column in columns):
        # A jsonb column takes the nested value as it is; get_prep_value would make it a string.
        prepared = [
            (column, _as_is if isinstance(fields[column], models.JSONField) else fields[column].get_prep_value)
            for column in columns
        ]
    names = ", ".join(quote(column) for column in columns)
    definitions = ", ".join(f"{quote(column)} {types[column]}" for column in columns)
    sql = f"INSERT INTO {quote(meta.db_table)} ({names}) SELECT {names} FROM jsonb_to_recordset(%s::jsonb) AS u({definitions})"
    return sql, prepared


def _as_is(value: Any) -> Any:
    return value


def _json_scalar(value: Any) -> Any:
    """What JSON cannot say as it is: a datetime at full precision (DjangoJSONEncoder would cut it
    to milliseconds; a naive one taken in the current time zone, as Django stores it), a date, a
    UUID, a lazy string."""
    if isinstance(value, datetime.datetime):
        return (value if value.tzinfo is not None else timezone.make_aware(value)).isoformat()
    if isinstance(value, datetime.date):
        return value.isoformat()
    if isinstance(value, uuid.UUID | Promise):
        return str(value)
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


@functools.cache
def _db_types(model: type[models.Model]) -> dict[str, str]:
    """The database type of each of the model's columns (Field.db_type works it out on each call)."""
    return {str(field.column): str(field.db_type(connection)) for field in model._meta.concrete_fields}


def model_rows(objects: Sequence[models.Model]) -> list[dict[str, Any]]:
    """Unsaved model instances as rows by column name, for the inserts above; each field's
    ``pre_save`` gives its value, as an INSERT by the ORM would (``auto_now`` stamps included)."""
    if not objects:
        return []
    readers = _row_readers(type(objects[0]))
    return [
        {column: getattr(obj, attname) if field is None else field.pre_save(obj, True) for column, attname, field in readers}
        for obj in objects
    ]


@functools.cache
def _row_readers(model: type[models.Model]) -> list[tuple[str, str, Any]]:
    """Each column's name, attribute and, where its pre_save does more than read the attribute
    (an ``auto_now`` stamp, say), its field."""
    readers = []
    for field in model._meta.concrete_fields:
        pre_save = type(field).pre_save
        plain = pre_save is models.Field.pre_save or (
            pre_save in (models.DateField.pre_save, models.DateTimeField.pre_save) and not (field.auto_now or field.auto_now_add)  # type: ignore[attr-defined]
        )
        readers.append((str(field.column), field.attname, None if plain else field))
    return readers


@dataclass(frozen=True)
class CountInto:
    """Counters that go up by one for each row an ``update_rows`` changes: ``keys`` gives each row's
    (by primary key) counter, as the values of ``model``'s fields ``key_fields``."""

    model: type[models.Model]
    key_fields: tuple[str, ...]
    keys: dict[Any, tuple[Any, ...]]
    counter: str = "count"


def counts_add(
    model: type[models.Model], counts: dict[tuple[Any, ...], int], *, key_fields: tuple[str, ...], counter: str = "count"
) -> None:
    """Add each of ``counts`` (by key: the values of ``key_fields``, which a unique index covers)
    to its counter row, making the missing rows, in one ``INSERT ... ON CONFLICT DO UPDATE``; in
    key order, so two transactions adding to the same rows take their locks in the same order."""
    counts = {key: delta for key, delta in counts.items() if delta}
    if not counts:
        return
    fields: list[Any] = [model._meta.get_field(name) for name in key_fields]
    insert, conflict = _counter_upsert(model, key_fields, counter)
    marks = "(" + ", ".join(["%s"] * (len(fields) + 1)) + ")"
    params: list[Any] = []
    for key in sorted(counts, key=_sortable):
        params.extend(field.get_db_prep_save(value, connection) for field, value in zip(fields, key, strict=True))
        params.append(counts[key])
    with connection.cursor() as cursor:
        cursor.execute(f"{insert} VALUES {', '.join([marks] * len(counts))} {conflict}", params)


def _sortable(key: tuple[Any, ...]) -> tuple[str, ...]:
    return tuple(str(value) for value in key)


def _counter_upsert(model: type[models.Model], key_fields: tuple[str, ...], counter: str) -> tuple[str, str]:
    """The ``INSERT INTO table (keys, counter)`` and ``ON CONFLICT ... DO UPDATE`` of a counter upsert."""
    quote = connection.ops.quote_name
    table = quote(model._meta.db_table)

    def column(name: str) -> str:
        field: Any = model._meta.get_field(name)
        return quote(str(field.column))

    columns = ", ".join(column(name) for name in key_fields)
    total = column(counter)
    return (
        f"INSERT INTO {table} ({columns}, {total})",
        f"ON CONFLICT ({columns}) DO UPDATE SET {total} = {table}.{total} + EXCLUDED.{total}",
    )


def update_rows(
    model: type[models.Model],
    rows: dict[Any, dict[str, Any]],
    *,
    same: dict[str, Any],
    where: dict[str, Any] | None = None,
    count_into: CountInto | None = None,
) -> set[Any]:
    """``UPDATE ... FROM unnest(...)`` (PostgreSQL; ``VALUES`` on SQLite): each row (by primary key) its own values of the fields in
    ``rows``, every row the values in ``same``, only where the fields in ``where`` still have
    those values; returns the primary keys updated (``RETURNING``). One statement for a batch,
    where ``bulk_update`` builds a CASE per field from an ORM expression per row (most of a
    worker's time recording a batch). PostgreSQL and SQLite (3.33+) alike; the source's columns
    are ``column1``... on both.

    ``count_into``: counters of the rows it changes, added to in the same statement on PostgreSQL
    (the UPDATE a data-modifying CTE that the counters' upsert reads), so counting costs no round
    trip; elsewhere (SQLite, no UPDATE in a WITH) a second statement."""
    if not rows:
        return set()
    meta, quote = model._meta, connection.ops.quote_name
    pk: Any = meta.pk
    table = quote(meta.db_table)
    varying = list(next(iter(rows.values())))

    def field_of(name: str) -> Any:
        return meta.get_field(name)

    in_statement = count_into is not None and connection.vendor == "postgresql"
    key_fields: list[Any] = (
        [count_into.model._meta.get_field(name) for name in count_into.key_fields] if count_into and in_statement else []
    )
    columns_of = [pk, *map(field_of, varying), *key_fields]
    params: list[Any] = []
    for key, values in rows.items():
        params.append(pk.get_db_prep_save(key, connection))
        params.extend(field_of(name).get_db_prep_save(values[name], connection) for name in varying)
        if count_into and in_statement:
            params.extend(
                field.get_db_prep_save(value, connection) for field, value in zip(key_fields, count_into.keys[key], strict=True)
            )
    if connection.vendor == "postgresql":
        # One array a column (unnest): a statement of the same few bytes whatever the rows, which
        # psycopg parses once and caches; a VALUES row a row was kilobytes to scan at each execute.
        width = len(columns_of)
        source = (
            "unnest("
            + ", ".join(f"CAST(%s AS {field.db_type(connection)}[])" for field in columns_of)
            + f") AS v({', '.join(f'column{index + 1}' for index in range(width))})"
        )
        params = [params[index::width] for index in range(width)]
    else:
        row_marks = "(" + ", ".join(["%s"] * len(columns_of)) + ")"
        source = f"(VALUES {', '.join([row_marks] * len(rows))}) AS v"
    assignments = [f"{quote(field_of(name).column)} = v.column{index + 2}" for index, name in enumerate(varying)]
    same_params = []
    for name, value in same.items():
        assignments.append(f"{quote(field_of(name).column)} = %s")
        same_params.append(field_of(name).get_db_prep_save(value, connection))
    conditions, where_params = [f"{table}.{quote(pk.column)} = v.column1"], []
    # The rows are found by primary key, one probe each, and ``where`` is checked on each found
    # (IS NOT DISTINCT FROM, which no index serves). With ``=``, PostgreSQL's planner, counting on
    # statistics from before a burst ("one row in sending"), drove the record of a delivery from
    # the status index and compared each of the hundreds of rows in ``sending`` with each of the
    # batch's: a tenth of a second a record in a drain of 1,000 single accepts.
    # (SQLite's IS is the same null-safe equality: a None in ``where`` matches NULL on both.)
    compare = "IS NOT DISTINCT FROM" if connection.vendor == "postgresql" else "IS"
    for name, value in (where or {}).items():
        conditions.append(f"{table}.{quote(field_of(name).column)} {compare} %s")
        where_params.append(field_of(name).get_db_prep_save(value, connection))
    first_key = len(varying) + 2
    returning = f"{table}.{quote(pk.column)} AS pk" + "".join(
        f", v.column{first_key + i} AS k{i}" for i in range(len(key_fields))
    )
    sql = f"UPDATE {table} SET {', '.join(assignments)} FROM {source} WHERE {' AND '.join(conditions)} RETURNING {returning}"
    if count_into and in_statement:
        insert, conflict = _counter_upsert(count_into.model, count_into.key_fields, count_into.counter)
        keys = ", ".join(f"k{i}" for i in range(len(key_fields)))
        sql = (
            f"WITH changed AS ({sql}), counted AS ({insert} SELECT {keys}, count(*) FROM changed "
            f"GROUP BY {keys} ORDER BY {keys} {conflict}) SELECT pk FROM changed"
        )
    with connection.cursor() as cursor:
        cursor.execute(sql, [*same_params, *params, *where_params])
        changed = returned_values(pk, cursor.fetchall())
    if count_into and not in_statement:
        by_text = {str(key): counter for key, counter in count_into.keys.items()}
        counts: dict[tuple[Any, ...], int] = {}
        for key in changed:
            counter = by_text[str(key)]
            counts[counter] = counts.get(counter, 0) + 1
        counts_add(count_into.model, counts, key_fields=count_into.key_fields, counter=count_into.counter)
    return changed
