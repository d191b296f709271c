"""Writing inboxes: an item delivered, items marked. Each change writes the item, its user's
counters and the events its streams send in one transaction, and wakes the streams after commit.

Items are locked (``SELECT ... FOR UPDATE``, in id order) before their change is decided, and
the counters move by the difference between the states read under that lock: of fifty concurrent
"read" marks of one item exactly one changes it and counts. The counter's UPDATE comes after the
items' and before the events' insert, so a user's changes are serialised on their counter row and
their events are numbered in commit order (the stream's resume depends on it).
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import Any

from django.db import transaction
from django.db.models import F, QuerySet, Value
from django.db.models.functions import Coalesce
from django.utils import timezone

from ..models import InboxCounter, InboxCounts, InboxEvent, InboxEventType, InboxItem, counted, inbox_item_fields
from ..sql import insert_or_nothing
from .live import Told, wake

# A bulk change sends each changed item as an item.updated event up to this many; past it only the
# counts (with "resync": true, so a page reloads its list instead of taking thousands of events).
BULK_EVENT_ITEMS = 100
# Ids per UPDATE ... WHERE id IN (...): well inside SQLite's and PostgreSQL's parameter limits.
UPDATE_CHUNK = 2000

ItemState = tuple[datetime | None, datetime | None, datetime | None]  # seen_at, read_at, archived_at


def _read(state: ItemState, now: datetime) -> ItemState:
    seen, read, archived = state
    return seen or now, read or now, archived


# What each action makes of an item's state (read is seen too), and the UPDATE that writes it on
# the items it changed.
TRANSITIONS: dict[str, Any] = {
    "seen": lambda s, now: (s[0] or now, s[1], s[2]),
    "read": _read,
    "unread": lambda s, now: (s[0], None, s[2]),
    "archive": lambda s, now: (s[0], s[1], s[2] or now),
    "unarchive": lambda s, now: (s[0], s[1], None),
}
ACTIONS = tuple(TRANSITIONS)


def _update_values(action: str, now: datetime) -> dict[str, Any]:
    values: dict[str, dict[str, Any]] = {
        "seen": {"seen_at": now},
        "read": {"read_at": now, "seen_at": Coalesce(F("seen_at"), Value(now))},
        "unread": {"read_at": None},
        "archive": {"archived_at": now},
        "unarchive": {"archived_at": None},
    }
    return values[action]


def _state_counts(state: ItemState) -> InboxCounts:
    return counted(seen=state[0] is not None, read=state[1] is not None, archived=state[2] is not None)


def inbox_item_deliver(*, values: dict[str, Any]) -> tuple[InboxItem, bool]:
    """Put an item in its user's inbox once per notification (``values``: its fields by name);
    (the item, True) when this call made it, (the one made before, False) on a redelivery."""
    item = InboxItem(**values)
    row = {str(field.column): getattr(item, field.attname) for field in InboxItem._meta.concrete_fields}
    with transaction.atomic():
        if not insert_or_nothing(InboxItem, row, conflict_fields=("notification_id",)):
            return InboxItem.objects.get(notification_id=item.notification_id), False
        InboxCounter.add(client_id=item.client_id, user_id=item.user_id, delta=item.counts)
        told = _events_append(
            client_id=item.client_id, user_id=item.user_id, items=[item], event_type=InboxEventType.ITEM_CREATED
        )
        transaction.on_commit(lambda: wake(client_id=item.client_id, user_id=item.user_id, told=told))
    return item, True


def inbox_items_change(*, client_id: Any, user_id: str, items: QuerySet[InboxItem], action: str) -> list[Any]:
    """Apply ``action`` (one of ACTIONS) to ``items`` (the user's, already filtered); the ids of
    those it changed (an item already in the state is left as it is and counts nothing)."""
    transition = TRANSITIONS[action]
    now = timezone.now()
    with transaction.atomic():
        rows = items.select_for_update().order_by("id").values_list("id", "seen_at", "read_at", "archived_at")
        changed: list[Any] = []
        delta = InboxCounts()
        for pk, *state in rows:
            before: ItemState = (state[0], state[1], state[2])
            after = transition(before, now)
            if after != before:
                changed.append(pk)
                delta = delta + (_state_counts(after) - _state_counts(before))
        if not changed:
            return []
        for start in range(0, len(changed), UPDATE_CHUNK):
            InboxItem.objects.filter(pk__in=changed[start : start + UPDATE_CHUNK]).update(**_update_values(action, now))
        InboxCounter.add(client_id=client_id, user_id=user_id, delta=delta)
        if len(changed) <= BULK_EVENT_ITEMS:
            updated = InboxItem.objects.filter(pk__in=changed).order_by("-created_at", "-id")
            told = _events_append(client_id=client_id, user_id=user_id, items=updated, event_type=InboxEventType.ITEM_UPDATED)
        else:
            told = _events_append(
                client_id=client_id, user_id=user_id, items=[], event_type=InboxEventType.ITEM_UPDATED, resync=True
            )
        transaction.on_commit(lambda: wake(client_id=client_id, user_id=user_id, told=told))
    return changed


def _events_append(*, client_id: Any, user_id: str, items: Iterable[InboxItem], event_type: str, resync: bool = False) -> Told:
    """The events of one change: one per item, then the user's counts as they now are; returns
    them with the id of the user's event before them (the wake-up carries both)."""
    counter = InboxCounter.objects.get(client_id=client_id, user_id=user_id)  # locked by this change's UPDATE
    counts_data: dict[str, Any] = InboxCounts(counter.unseen, counter.unread, counter.total).as_dict()
    if resync:
        counts_data["resync"] = True
    events = [InboxEvent(client_id=client_id, user_id=user_id, type=event_type, data=inbox_item_fields(item)) for item in items]
    events.append(InboxEvent(client_id=client_id, user_id=user_id, type=InboxEventType.COUNTS, data=counts_data))
    InboxEvent.objects.bulk_create(events)
    InboxCounter.objects.filter(pk=counter.pk).update(last_event_id=events[-1].id)
    return Told(previous=counter.last_event_id, events=[(event.id, event.type, event.data) for event in events])


def inbox_events_purge(*, before: datetime) -> int:
    """Forget the events older than the resume window; a stream resuming from one of them is
    sent what is left (and its page reloads its list)."""
    deleted, _ = InboxEvent.objects.filter(created_at__lt=before).delete()
    return deleted
