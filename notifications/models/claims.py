"""What a delivery claim returns (``Claim``: the row, its attempt, the client it was claimed
under), and the claim and its attempts in one statement (PostgreSQL): the claim's ``UPDATE ...
RETURNING`` as a data-modifying CTE, and an ``INSERT`` of each claimed row's attempt from it.

A claim's row comes back with its client's columns (claim_statement); each is read by name into a
``ClientSnapshot`` (claim_of_row), never set on the Notification: a column the statement no longer returns
(an alias renamed) is a KeyError and a value of the wrong kind (NULL) a TypeError at the claim,
never a default. A test token's message taken for live would go to the real provider.

As one statement in autocommit the claim commits as it returns. As two statements in a transaction
it stayed open while the worker read the claimed rows and sent the insert; meanwhile it held the
rows it had claimed and those a backlog claim had locked (models/backlog.py), so
other workers' claims and the records of their deliveries queued behind a Python thread.
"""

from __future__ import annotations

import functools
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from django.db import connection

from .attempts import DeliveryAttempt
from .backlog import BacklogClaim, backlog_rows_sql
from .clients import ApiClient, webhook_secrets_in_grace

if TYPE_CHECKING:
    from .notifications import Notification


@dataclass(frozen=True)
class ClientSnapshot:
    """The API client a notification was claimed under, as the claim's statement read it: what its
    send needs (the name and secrets a webhook is signed with, test mode) and its record (the URL
    of its status webhook)."""

    name: str
    webhook_secret: str
    webhook_previous_secrets: tuple[str, ...]  # those replaced and still within their grace period
    status_webhook_url: str  # "" when it has none: no status event is written (services/records/status_events.py)
    is_test: bool  # test mode: sent to the capture sink, never a provider (services/delivery/capture.py)

    def __post_init__(self) -> None:
        texts = (self.name, self.webhook_secret, *self.webhook_previous_secrets, self.status_webhook_url)
        if type(self.is_test) is not bool or not all(isinstance(text, str) for text in texts):
            raise TypeError(f"a claim returned a client of the wrong kinds: {self!r}")


@dataclass(frozen=True)
class Claim:
    """One notification a claim took for one send: the row as claimed (status ``sending``), its
    attempt (inserted, in progress) and the client it was claimed under."""

    notification: Notification
    attempt: DeliveryAttempt
    client: ClientSnapshot

    @property
    def is_test(self) -> bool:
        """A test token's notification: captured, never sent."""
        return self.client.is_test


def claim_of_row(
    notification: Notification, columns: Mapping[str, Any], *, now: datetime, inserted: bool, webhook_secret_grace_seconds: float
) -> Claim:
    """The Claim of one row of the claim's statement: ``notification`` (its own columns) and
    ``columns``, the others by name. ``inserted``: the statement inserted the attempt (its id is
    ``attempt_id``); else the attempt is built here, for the caller to insert."""
    retired = columns["client_webhook_secrets_retired"]
    client = ClientSnapshot(
        name=columns["client_name"],
        webhook_secret=columns["client_webhook_secret"],
        webhook_previous_secrets=webhook_secrets_in_grace(retired, now=now, grace_seconds=webhook_secret_grace_seconds),
        status_webhook_url=columns["client_status_webhook_url"],
        is_test=_flag(columns["client_is_test"]),
    )
    number = columns["last_attempt_number"] + 1
    if not inserted:
        attempt = DeliveryAttempt(notification=notification, number=number, started_at=now, channel=notification.channel)
        return Claim(notification=notification, attempt=attempt, client=client)
    # As loaded from the database (Model.from_db): the statement inserted it with these values.
    given = {"id": columns["attempt_id"], "notification_id": notification.pk, "number": number, "started_at": now}
    given["channel"] = notification.channel
    values = [given.get(name, default) for name, default in _attempt_defaults()]
    attempt = DeliveryAttempt.from_db(connection.alias, None, values)  # type: ignore[arg-type]
    attempt.notification = notification
    return Claim(notification=notification, attempt=attempt, client=client)


@functools.cache
def _attempt_defaults() -> list[tuple[str, Any]]:
    """Each column of an attempt and the default the claim's statement inserts it with
    (claim_with_attempts_sql); those claim_of_row is given are never read from here."""
    return [
        (field.attname, None if callable(field.default) else field.get_default())
        for field in DeliveryAttempt._meta.concrete_fields
    ]


def _flag(value: Any) -> bool:
    """A boolean column as returned: PostgreSQL's bool, SQLite's 0 or 1; anything else (NULL) is a TypeError."""
    if value in (0, 1) and isinstance(value, int):
        return bool(value)
    raise TypeError(f"a claim returned {value!r} for a boolean")


# The attempt's columns taken from its claimed row; every other column gets its field's default.
_FROM_CLAIMED = {"notification": "id", "number": "last_attempt_number + 1", "channel": "channel"}


def claim_statement(
    model: type[Notification],
    notification_ids: list[Any],
    *,
    pending: list[str],
    sending: str,
    now: datetime,
    backlog: BacklogClaim | None,
    wait: bool,
    attempts: bool,
) -> tuple[str, list[Any]]:
    """Notification.claim_for_delivery's statement and its parameters: ``model``'s rows of
    ``notification_ids`` (and ``backlog``'s) still in a ``pending`` status go to ``sending``, each
    returned with its client's columns (claim_of_row reads them). ``attempts`` (PostgreSQL only):
    it inserts each row's attempt too, whose id each returned row carries as ``attempt_id``."""
    quote = connection.ops.quote_name
    table, clients = quote(model._meta.db_table), quote(ApiClient._meta.db_table)
    attempt_table = quote(DeliveryAttempt._meta.db_table)
    columns = ", ".join(f"{table}.{quote(str(field.column))}" for field in model._meta.concrete_fields)
    ids = [model._meta.pk.get_db_prep_value(uuid.UUID(str(pk)), connection) for pk in notification_ids]  # type: ignore[union-attr]
    marks, status_marks = ", ".join(["%s"] * len(ids)), ", ".join(["%s"] * len(pending))
    wanted = f"{table}.id IN ({marks}) AND {table}.status IN ({status_marks})"
    params: list[Any] = [*ids, *pending]
    prefix = ""
    if backlog is not None:
        extra_sql, extra_params = backlog_rows_sql(table=table, pending=pending, own=ids, backlog=backlog)
        # A data-modifying statement's CTEs: each its own lock; the UPDATE takes their union.
        if ids:
            own = f"SELECT id FROM {table} WHERE {wanted} ORDER BY id FOR UPDATE SKIP LOCKED"
            prefix = f"WITH own AS ({own}), backlog AS ({extra_sql}) "
            taken = "SELECT id FROM own UNION ALL SELECT id FROM backlog"
        else:  # the backlog alone (a worker going on with it, services/delivery/send.py)
            prefix, taken = f"WITH backlog AS ({extra_sql}) ", "SELECT id FROM backlog"
            params = []
        # Still pending: the backlog's rows are locked unfiltered (models/backlog.py); one another
        # claim sent since this statement began is rechecked here and left out. In a CASE, which
        # no index serves: the rows are found by id, never by scanning every pending row.
        wanted = f"{table}.id IN ({taken}) AND CASE WHEN {table}.status IN ({status_marks}) THEN TRUE ELSE FALSE END"
        params += extra_params
    elif len(ids) > 1 and connection.vendor == "postgresql":
        lock = "FOR UPDATE" if wait else "FOR UPDATE SKIP LOCKED"
        wanted = f"{table}.id IN (SELECT id FROM {table} WHERE {wanted} ORDER BY id {lock})"
    # The client's fields as subqueries, not UPDATE ... FROM: SQLite cannot return the FROM
    # table's columns, and this runs on the embedded default too.
    sql = (
        f"{prefix}UPDATE {table} SET status = %s, claimed_at = %s, updated_at = %s, attempt_count = attempt_count + 1 "
        f"WHERE {wanted} "
        f"RETURNING {columns}, "
        f"(SELECT c.name FROM {clients} c WHERE c.id = {table}.client_id) AS client_name, "
        f"(SELECT c.webhook_secret FROM {clients} c WHERE c.id = {table}.client_id) AS client_webhook_secret, "
        # The secrets rotated out that may still sign (their grace periods: claim_of_row).
        f"(SELECT c.webhook_secrets_retired FROM {clients} c WHERE c.id = {table}.client_id) AS client_webhook_secrets_retired, "
        f"(SELECT c.status_webhook_url FROM {clients} c WHERE c.id = {table}.client_id) AS client_status_webhook_url, "
        f"(SELECT c.is_test FROM {clients} c WHERE c.id = {table}.client_id) AS client_is_test, "
        f"(SELECT COALESCE(MAX(a.number), 0) FROM {attempt_table} a WHERE a.notification_id = {table}.id) AS last_attempt_number"
    )
    stamp = connection.ops.adapt_datetimefield_value(now)
    # The SET's values come first, then the WHERE's: the backlog's rows, or the ids' own.
    params = [*params, sending, stamp, stamp, *pending] if backlog is not None else [sending, stamp, stamp, *params]
    if attempts:
        sql, params = claim_with_attempts_sql(prefix=prefix, update=sql[len(prefix) :], params=params, now=now)
    return sql, params


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
