"""Accepting a batch of notifications: each item on its own terms (its own idempotency key, its
own validation, its own answer), written together and published together."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.db import transaction
from django.utils import timezone

from ..errors import IdempotencyConflict, NotificationError
from ..models import ApiClient, IdempotencyKey, Notification, Status, StatusEventType
from ..sql import insert_rows_or_nothing
from .accept import (
    AcceptResult,
    NotificationRequest,
    idempotency_answer,
    idempotency_key_row,
    idempotency_replay,
    notification_build,
)
from .caps import CapSlot, recipient_cap_take
from .digests import digest_refused_in_batch
from .outbox import notification_enqueued_state, notifications_publish
from .status_events import status_event_record


@dataclass(frozen=True)
class BatchItem:
    request: NotificationRequest
    idempotency_key: str
    fingerprint: str


def notification_accept_batch(*, client: ApiClient, items: list[BatchItem]) -> list[AcceptResult | NotificationError]:
    """Accept every item that can be accepted, exactly once per (client, key), and answer each in
    its slot: its AcceptResult (new or replayed) or the domain error that refused it.

    The live keys of the batch are read in one query; the new notifications and their keys are
    inserted in one transaction (one multi-row INSERT each, the keys with ON CONFLICT DO NOTHING)
    and published after it in one round trip. A key that a concurrent request took meanwhile
    replays that request's answer; a key repeated within the batch replays the first item's."""
    now = timezone.now()
    results: list[AcceptResult | NotificationError | None] = [None] * len(items)
    stored = IdempotencyKey.objects.filter(client=client, key__in={i.idempotency_key for i in items})
    live: dict[str, IdempotencyKey] = {}
    expired: list[str] = []
    for record in stored:
        if record.expires_at > now:
            live[record.key] = record
        else:
            expired.append(record.key)
    first_of_key: dict[str, int] = {}
    built: list[tuple[int, Notification, dict[str, Any], float]] = []
    cap_slots: dict[Any, CapSlot] = {}
    for index, item in enumerate(items):
        key = item.idempotency_key
        if key in live or key in first_of_key:
            continue  # answered below, from the stored key or the first item with it
        first_of_key[key] = index
        try:
            digest_refused_in_batch(item.request.digest)
            notification = notification_build(client=client, request=item.request, idempotency_key=key)
        except NotificationError as exc:
            results[index] = exc
            continue
        cap_slots[notification.id] = recipient_cap_take(notification=notification)  # may suppress it (throttled)
        delay = notification_enqueued_state(notification, now=notification.created_at)
        body = {"id": str(notification.id), "status": notification.status, "idempotency_key": key}
        built.append((index, notification, body, delay))

    taken: set[Any] = set()
    try:
        taken = _insert(client=client, items=items, built=built, expired=expired, now=now)
    finally:  # what was not written (a replay, or the whole batch failing) gives its cap slot back
        for notification_id, slot in cap_slots.items():
            if notification_id not in taken:
                slot.release()
    for index, notification, body, _ in built:
        if notification.id in taken:
            results[index] = AcceptResult(status_code=202, body=body, replayed=False, notification_id=str(notification.id))
    notifications_publish(pending=[(n, d) for _, n, _, d in built if n.id in taken and n.enqueued_at is not None])

    for index, item in enumerate(items):
        if results[index] is None:
            first = results[first_of_key.get(item.idempotency_key, index)]
            results[index] = _answer_from_key(
                client=client, item=item, record=live.get(item.idempotency_key), first=first, now=now
            )
    return [result for result in results if result is not None]


def _insert(
    *,
    client: ApiClient,
    items: list[BatchItem],
    built: list[tuple[int, Notification, dict[str, Any], float]],
    expired: list[str],
    now: Any,
) -> set[Any]:
    """Insert the keys (ON CONFLICT DO NOTHING) and the notifications whose keys went in; returns
    the ids of the notifications written."""
    if not built:
        return set()
    rows = [
        idempotency_key_row(
            client=client, key=notification.idempotency_key, fingerprint=items[index].fingerprint, body=body, now=now
        )
        for index, notification, body, _ in built
    ]
    with transaction.atomic():
        if expired:  # an expired key is free again, as for a single accept; it is there until purged
            IdempotencyKey.objects.filter(client=client, key__in=expired, expires_at__lte=now).delete()
        inserted_keys = insert_rows_or_nothing(IdempotencyKey, rows, conflict_fields=("client_id", "key"), returning="key")
        written = [notification for _, notification, _, _ in built if notification.idempotency_key in inserted_keys]
        Notification.objects.bulk_create(written)
        status_event_record(
            notifications=[n for n in written if n.status == Status.SUPPRESSED], event_type=StatusEventType.SUPPRESSED
        )
    return {notification.id for notification in written}


def _answer_from_key(
    *, client: ApiClient, item: BatchItem, record: IdempotencyKey | None, first: Any, now: Any
) -> AcceptResult | NotificationError:
    """The answer of an item whose key was taken: by a stored request (read with the batch's keys,
    or, when a concurrent request took it meanwhile, read now), or by an earlier item."""
    try:
        if record is not None:
            return idempotency_answer(record, fingerprint=item.fingerprint)
        replay = idempotency_replay(client=client, key=item.idempotency_key, fingerprint=item.fingerprint, now=now)
    except NotificationError as exc:
        return exc
    if replay is not None:
        return replay
    if isinstance(first, NotificationError):  # the first item with this key was refused: so is this one
        return first
    return IdempotencyConflict(
        "this Idempotency-Key was already used with a different request body", extra={"idempotency_key": item.idempotency_key}
    )
