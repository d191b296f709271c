"""Model instances from the rows of a raw statement, converted as the ORM converts them (its
compiler's converters: jsonb arrives as text, SQLite's datetimes as strings), without a
RawQuerySet: on the hot paths (a claim's fifty rows, a single accept's recipient) RawQuerySet
worked out its columns and converters again on every call, a tenth of a worker's time in a drain."""

from __future__ import annotations

import functools
from collections.abc import Iterable, Iterator, Sequence
from typing import Any, TypeVar

from django.db import connection, connections, models

M = TypeVar("M", bound=models.Model)


def model_instances(model: type[M], rows: Iterable[Sequence[Any]]) -> list[M]:
    """One ``model`` instance a row, whose values are its concrete fields' in their order."""
    return [instance for instance, _ in _instances_and_rest(model, rows)]


def rows_with_models(model: type[M], sql: str, params: list[Any]) -> list[tuple[M, dict[str, Any]]]:
    """Run ``sql``, whose columns are ``model``'s concrete fields in their order and then any
    others; for each row, its ``model`` instance and the other columns by name (never set on the
    instance: a caller reads them into a type of its own, models/claims.py)."""
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        names = [column[0] for column in cursor.description[len(model._meta.concrete_fields) :]]
        rows = cursor.fetchall()
    return [(instance, dict(zip(names, rest, strict=True))) for instance, rest in _instances_and_rest(model, rows)]


def _instances_and_rest(model: type[M], rows: Iterable[Sequence[Any]]) -> Iterator[tuple[M, Sequence[Any]]]:
    compiler, converters = _converters(model, connections[connection.alias])
    width = len(model._meta.concrete_fields)
    for values in compiler.apply_converters(rows, converters) if converters else rows:
        yield model.from_db(connection.alias, None, list(values[:width])), values[width:]  # type: ignore[arg-type]


@functools.lru_cache(maxsize=256)
def _converters(model: type[models.Model], database: Any) -> tuple[Any, dict[int, Any]]:
    """The ORM's compiler and converters of ``model``'s columns, made once per thread's database
    connection (``database``, its DatabaseWrapper), to which they are bound."""
    compiler = model._default_manager.all().query.get_compiler(connection=database)
    table = model._meta.db_table
    return compiler, compiler.get_converters([field.get_col(table) for field in model._meta.concrete_fields])
