"""Accepting a batch of notifications: each item on its own terms (its own idempotency key, its
own validation, its own answer), written together and published together."""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from django.utils import timezone

from ... import metrics, tracing
from ...conf import get_config
from ...errors import NotificationError
from ...logging import request_id_var
from ...models import ApiClient, IdempotencyKey, Notification, Status
from ..digests.join import digest_refused_in_batch
from ..policy.caps import CapSlot, recipient_cap_take
from ..policy.template_budget import render_pool
from ..records.outbox import notification_enqueued_state, notifications_publish
from .accept import NotificationRequest, accept_lookups, notification_accept, notification_build
from .idempotency import AcceptResult, idempotency_answer, idempotency_key_row
from .shared_write import GroupRows, accept_rows_insert, shared_writes


@dataclass(frozen=True)
class BatchItem:
    request: NotificationRequest
    idempotency_key: str
    fingerprint: str
    # The OpenTelemetry context of the request the item came from, when items of one batch came
    # from separate requests (services/intake/accept_group.py): each is built and published in its own.
    trace_context: Any = None
    request_id: str = ""  # the X-Request-ID of that request, for the log lines written for the item


def notification_accept_batch(*, client: ApiClient, items: list[BatchItem]) -> list[AcceptResult | NotificationError]:
    """Accept every item that can be accepted, exactly once per (client, key), and answer each in
    its slot: its AcceptResult (new or replayed) or the domain error that refused it."""
    results: list[AcceptResult | NotificationError | None] = [None] * len(items)
    notification_accept_batch_into(client=client, items=items, results=results)
    return [result for result in results if result is not None]


def notification_accept_batch_into(
    *, client: ApiClient, items: list[BatchItem], results: list[AcceptResult | NotificationError | None]
) -> None:
    """notification_accept_batch, answering each item in ``results`` (the caller's, one slot per
    item) as soon as its answer is settled: an item written is answered from the statement's own
    result, before any further statement, so a failure after the commit (a read of taken keys, say)
    leaves it answered 202 and the caller re-runs only the items still without an answer.

    The batch's recipients and suppressions are read in one query each; the new notifications and
    their keys are written in one statement (the keys with ON CONFLICT DO NOTHING, the
    notifications whose key went in: sql.insert_claimed), so one round trip and one commit, and
    published after it in one round trip. Only an item whose key was taken (a replay, a concurrent
    request, a key repeated within the batch) costs a read of its key, after the write; one whose
    key had expired is accepted on its own, which replaces the key as a single accept does."""
    # Its renders share one TEMPLATE_RENDER_SECONDS: a batch of 100 bombs holds this thread (an
    # API batch's, or a web process's accept-group leader's) 1 s, not 100.
    with render_pool(seconds=get_config().template_render_seconds, what="the batch's template renders"):
        _accept_batch(client=client, items=items, results=results)


def _accept_batch(*, client: ApiClient, items: list[BatchItem], results: list[AcceptResult | NotificationError | None]) -> None:
    now = timezone.now()
    first_of_key: dict[str, int] = {}
    for index, item in enumerate(items):
        first_of_key.setdefault(item.idempotency_key, index)
    lookups = accept_lookups(client=client, requests=[items[index].request for index in first_of_key.values()])
    built: list[tuple[int, Notification, dict[str, Any], float]] = []
    cap_slots: dict[Any, CapSlot] = {}
    carriers: dict[str, dict[str, str]] | None = None if all(i.trace_context is None for i in items) else {}
    taken: set[Any] = set()
    try:
        for key, index in first_of_key.items():
            item = items[index]
            try:
                digest_refused_in_batch(item.request.digest)
                with _origin_attached(item):
                    notification = notification_build(client=client, request=item.request, idempotency_key=key, lookups=lookups)
                    if carriers is not None:
                        carriers[str(notification.id)] = tracing.message_carrier()
            except NotificationError as exc:
                results[index] = exc
                continue
            cap_slots[notification.id] = recipient_cap_take(notification=notification)  # may suppress it (throttled)
            delay = notification_enqueued_state(notification, now=notification.created_at)
            body = {"id": str(notification.id), "status": notification.status, "idempotency_key": key}
            built.append((index, notification, body, delay))
        taken = _insert(client=client, items=items, built=built, now=now, carriers=carriers)
    finally:  # what was not written (a taken key, a build or the write failing) gives its cap slot back
        for notification_id, slot in cap_slots.items():
            if notification_id not in taken:
                slot.release()
    for index, notification, body, _ in built:
        if notification.id in taken:
            results[index] = AcceptResult(status_code=202, body=body, replayed=False, notification_id=str(notification.id))
    for notification in (n for _, n, _, _ in built if n.id in taken and n.status == Status.SUPPRESSED):
        metrics.record_suppressed(channel=notification.channel, reason=notification.suppressed_reason, mode=client.mode)
    if carriers is None:  # a group commit's were published with its write
        notifications_publish(pending=[(n, d) for _, n, _, d in built if n.id in taken and n.enqueued_at is not None])
    _answer_taken_keys(client=client, items=items, results=results, first_of_key=first_of_key, now=now)


@contextlib.contextmanager
def _origin_attached(item: BatchItem) -> Iterator[None]:
    """Run the block as part of the request ``item`` came from: its trace and its request id, so
    what is recorded and logged for it is its own request's, not the thread's that runs it."""
    token = request_id_var.set(item.request_id) if item.request_id else None
    try:
        with tracing.context_attached(item.trace_context):
            yield
    finally:
        if token is not None:
            request_id_var.reset(token)


def _insert(
    *,
    client: ApiClient,
    items: list[BatchItem],
    built: list[tuple[int, Notification, dict[str, Any], float]],
    now: Any,
    carriers: dict[str, dict[str, str]] | None,
) -> set[Any]:
    """Insert the keys (ON CONFLICT DO NOTHING) and the notifications whose keys went in; returns
    the ids of the notifications written. One statement, in a transaction only when suppressed
    notifications bring their status events along. A group commit's (``carriers``: its items came
    from separate requests) is written, and published, with the other groups of the process
    writing at the same moment (shared_write.py); one request's batch on its own."""
    if not built:
        return set()
    keys = [
        idempotency_key_row(
            client=client, key=notification.idempotency_key, fingerprint=items[index].fingerprint, body=body, now=now
        )
        for index, notification, body, _ in built
    ]
    if carriers is not None:
        return shared_writes.write(GroupRows(keys=keys, pending=[(n, delay) for _, n, _, delay in built], carriers=carriers))
    return accept_rows_insert(keys=keys, notifications=[notification for _, notification, _, _ in built])


def _answer_taken_keys(
    *,
    client: ApiClient,
    items: list[BatchItem],
    results: list[AcceptResult | NotificationError | None],
    first_of_key: dict[str, int],
    now: Any,
) -> None:
    """Answer the items not accepted as new: from their key when it is live (a replay, or 422 for
    another body; a stored key also wins over a validation error, as for a single accept), else
    the refusal of the first item with its key when it is the same request; any other (its key
    had expired, or its first item was another request that was refused) is accepted on its own.
    One read of the keys concerned; none when every item was new."""
    pending = [index for index, result in enumerate(results) if result is None or isinstance(result, NotificationError)]
    if not pending:
        return
    wanted = {items[index].idempotency_key for index in pending}
    records = {record.key: record for record in IdempotencyKey.objects.filter(client=client, key__in=wanted)}
    for index in pending:
        item = items[index]
        record = records.get(item.idempotency_key)
        first = first_of_key[item.idempotency_key]
        try:
            if record is not None and record.expires_at > now:
                results[index] = idempotency_answer(record, fingerprint=item.fingerprint)
            elif results[index] is not None:
                continue  # refused (say, an invalid address), and no live key to answer instead
            elif (
                first != index and isinstance(results[first], NotificationError) and items[first].fingerprint == item.fingerprint
            ):
                results[index] = copy.copy(results[first])  # the same request as one refused (its own copy to raise)
            else:  # its key expired (or vanished), or went to no one (its first item, another request, was
                # refused): accepted on its own, which takes the key as a single accept does
                with _origin_attached(item):
                    results[index] = notification_accept(
                        client=client, request=item.request, idempotency_key=item.idempotency_key, fingerprint=item.fingerprint
                    )
        except NotificationError as exc:
            results[index] = exc
