"""The write of the accepts a web process is answering at the same moment, whichever their
clients: their keys and notifications in one statement, their delivery messages in one AMQP
transaction.

A client's concurrent accepts are built together in its group (intake/accept_group.py: their reads
shared, a slow render holding that client's group alone); what each group built is written here.
The first group to arrive writes at once; the groups that arrive while it writes queue, and the
first of them writes for all of them when it is done. Only the write is shared: no render, read or
cap check of another client's, so a group waits here on nothing but a statement and a publish it
would otherwise make itself. At low load a group finds nobody ahead and writes alone at once;
under load (many clients, one request each in flight: a group of one each) the statements,
commits and publishes per request fall as the load rises, as they do for one client's groups.

Each group is answered from the statement's result (which of its notifications went in), before
the publish; the statement failing fails every group in it (each then does what a failed group
does), the publish failing fails none (its rows are left for the sweeper, as after any refused
publish). The ids of a write travel together in its messages, as a group's do, each carrying its
own request's trace; a worker takes a message's ids client by client.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from dataclasses import dataclass, field
from typing import Any

from django.db import transaction

from ... import metrics, tracing
from ...models import ApiClient, IdempotencyKey, Notification, Status, StatusEventType
from ...sql import insert_claimed, model_rows
from ..records.outbox import notifications_publish
from ..records.status_events import status_event_record
from .accept import NotificationRequest, accept_draft, notification_accept
from .idempotency import AcceptResult, idempotency_key_row, idempotency_replay

logger = logging.getLogger("notifications.services")

# Groups one write takes at most (a web process has as many threads, 16 by default, so it is
# reached only with more): their rows are one statement's parameter.
WRITE_GROUPS_MAX = 64


@dataclass(eq=False)
class GroupRows:
    """What one group writes (its notifications with their publish delays, and their keys), and,
    once written, which of them went in."""

    keys: list[dict[str, Any]]
    pending: list[tuple[Notification, float]]
    carriers: dict[str, dict[str, str]]  # str(id) -> the trace context of the request it came from
    woken: threading.Event = field(default_factory=threading.Event)
    leads: bool = False  # set under the writes' lock: it writes the next rows
    written: set[Any] | None = None
    failure: BaseException | None = None
    groups: int = 0  # in the write that took it, its own included


class SharedWrites:
    """The rows this process's groups are waiting to write, and which group writes next."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._waiting: list[GroupRows] = []
        self._leading = False

    @property
    def waiting(self) -> int:
        """How many groups' rows are waiting to be written (the next write)."""
        with self._lock:
            return len(self._waiting)

    def write(self, rows: GroupRows) -> set[Any]:
        """Write ``rows`` with whatever other groups' are waiting and publish their messages;
        returns the ids of its notifications that went in (the others' keys were taken)."""
        with self._lock:
            self._waiting.append(rows)
            rows.leads = not self._leading
            self._leading = True
        if not rows.leads:
            rows.woken.wait()  # written by the group ahead, or given the lead by it
        if rows.leads:
            self._lead()
        if rows.failure is not None:
            raise rows.failure
        assert rows.written is not None
        return rows.written

    def _lead(self) -> None:
        """Write every group's rows waiting (its own first), then pass the lead on."""
        with self._lock:
            taken, self._waiting = self._waiting[:WRITE_GROUPS_MAX], self._waiting[WRITE_GROUPS_MAX:]
        for rows in taken:
            rows.groups = len(taken)
        try:
            _rows_write(taken)
        except BaseException as exc:  # raised in each unwritten group's own thread; a written one keeps its answer
            logger.warning("a shared write of %d groups of accepts failed", len(taken), exc_info=True)
            for rows in taken:
                if rows.written is None:
                    rows.failure = exc
        finally:
            with self._lock:
                for rows in taken:
                    rows.leads = False
                following = self._waiting[0] if self._waiting else None
                self._leading = following is not None
                if following is not None:
                    following.leads = True
            for rows in taken:
                rows.woken.set()
            if following is not None:
                following.woken.set()


def _rows_write(taken: list[GroupRows]) -> None:
    """One statement for every group's keys and notifications, each group's ``written`` set from
    its result; then one publish for all of them: their ids together in delivery messages
    (DELIVERY_BATCH_SIZE a message), each id carrying its own request's trace, as a group's."""
    written = accept_rows_insert(
        keys=[key for rows in taken for key in rows.keys],
        notifications=[notification for rows in taken for notification, _ in rows.pending],
    )
    for rows in taken:
        rows.written = {notification.id for notification, _ in rows.pending if notification.id in written}
    notifications_publish(
        pending=[(n, delay) for rows in taken for n, delay in rows.pending if n.id in written and n.enqueued_at is not None],
        carriers={pk: carrier for rows in taken for pk, carrier in rows.carriers.items()},
    )


def accept_rows_insert(*, keys: list[dict[str, Any]], notifications: list[Notification]) -> set[Any]:
    """Insert the idempotency keys (ON CONFLICT DO NOTHING) and the notifications whose keys went
    in, of one client or several; returns the ids of the notifications written. One statement, in
    a transaction only when suppressed notifications bring their status events along."""
    # In (client, key) order: two processes' writes claiming overlapping keys take their index
    # locks in the same order, so they wait for each other instead of deadlocking.
    keys = sorted(keys, key=lambda row: (row["client_id"], row["key"]))
    suppressed = [n for n in notifications if n.status == Status.SUPPRESSED]
    with transaction.atomic() if suppressed else contextlib.nullcontext():
        written = insert_claimed(
            (IdempotencyKey, keys, ("client_id", "key"), ("client_id", "key")),
            Notification,
            model_rows(notifications),
            claimed_by=("client_id", "idempotency_key"),
        )
        status_event_record(notifications=[n for n in suppressed if n.id in written], event_type=StatusEventType.SUPPRESSED)
    return written


shared_writes = SharedWrites()  # this process's


def notification_accept_shared(
    *, client: ApiClient, request: NotificationRequest, idempotency_key: str, fingerprint: str
) -> AcceptResult:
    """notification_accept for a request alone in its group (no digest: a digest member is never
    in one): the same reads and answers, its write and publish shared with the other groups
    writing at the same moment. A key already taken answers its replay (or 422); an expired one
    is replaced in place by notification_accept, as there."""
    draft = accept_draft(client=client, request=request, idempotency_key=idempotency_key, fingerprint=fingerprint)
    if isinstance(draft, AcceptResult):
        return draft
    notification, cap_slot, delay, body = draft.notification, draft.cap_slot, draft.delay_seconds, draft.body
    now = notification.created_at
    key = idempotency_key_row(client=client, key=idempotency_key, fingerprint=fingerprint, body=body, now=now)
    rows = GroupRows(keys=[key], pending=[(notification, delay)], carriers={str(notification.id): tracing.message_carrier()})
    written: set[Any] = set()
    try:
        try:
            written = shared_writes.write(rows)
        finally:
            if notification.id not in written:
                cap_slot.release()  # not written (its key taken, or the write failed): nothing will be sent
    except Exception:
        if rows.groups <= 1:
            raise  # its own write failed (the database down, say), as notification_accept's would
        # The statement it shared failed, perhaps for another group's row: written on its own.
        return notification_accept(client=client, request=request, idempotency_key=idempotency_key, fingerprint=fingerprint)
    if notification.id in written:
        if notification.status == Status.SUPPRESSED:  # as notification_accept counts it
            transaction.on_commit(
                lambda: metrics.record_suppressed(
                    channel=notification.channel, reason=notification.suppressed_reason, mode=metrics.mode_of(client)
                )
            )
        return AcceptResult(status_code=202, body=body, replayed=False, notification_id=str(notification.id))
    replay = idempotency_replay(client=client, key=idempotency_key, fingerprint=fingerprint, now=now)
    if replay is not None:
        return replay
    return notification_accept(client=client, request=request, idempotency_key=idempotency_key, fingerprint=fingerprint)
