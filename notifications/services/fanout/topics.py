"""Topics: a client's named lists of its recipients, which broadcasts are sent to."""

from __future__ import annotations

from dataclasses import dataclass

from django.db import IntegrityError, transaction
from django.utils import timezone

from ...errors import NotFound, ValidationFailed
from ...models import ApiClient, Topic, TopicSubscription
from ...selectors import recipient_ids_by_user_id, topic_get, topic_subscriber_count
from ...sql import insert_rows_or_nothing
from ..policy.limits import topic_subscribers_check
from ..policy.preferences import key_check

MAX_TOPIC_KEY_LENGTH = 100  # Topic.key
MAX_SUBSCRIBE = 1000  # user ids per call: one lookup and one multi-row INSERT
MAX_USER_ID_LENGTH = 255  # Recipient.user_id


@dataclass(frozen=True)
class SubscribeResult:
    added: int  # new subscriptions; the rest were there already
    subscriber_count: int


def topic_upsert(*, client: ApiClient, key: str, name: str) -> tuple[Topic, bool]:
    """Create the client's topic ``key`` or rename it; True when created."""
    topic_key_check(key)
    try:
        with transaction.atomic():
            return Topic.objects.update_or_create(client=client, key=key, defaults={"name": name})
    except IntegrityError:  # a concurrent PUT of the same new key created it first
        return Topic.objects.update_or_create(client=client, key=key, defaults={"name": name})


def topic_key_check(key: str) -> str:
    """A topic's key, as every path that names one takes it: a slug; else ValidationFailed
    naming ``key`` (a NUL or a space is a 400, never a database error)."""
    return key_check(key, field="key", max_length=MAX_TOPIC_KEY_LENGTH)


def topic_for_client(*, client: ApiClient, key: str) -> Topic:
    """The client's topic ``key``, for a write (its subscriber count not read); NotFound if none."""
    topic = topic_get(client=client, key=topic_key_check(key), counted=False)
    if topic is None:
        raise NotFound(f"no topic {key!r}: create it with PUT /api/v1/topics/{key}")
    return topic


def topic_subscribe(*, client: ApiClient, key: str, user_ids: list[str]) -> SubscribeResult:
    """Subscribe the client's recipients ``user_ids`` (1 to 1000) to the topic; idempotent: a
    subscriber already there stays as it is.

    Subscribers are the client's stored recipients (``PUT /recipients/{user_id}``): a user id with
    none is refused, the whole call with it, listing every unknown one in ``unknown_user_ids``. A
    broadcast sends to a recipient's stored address, so a subscriber nobody can be reached at is a
    mistake worth saying at once rather than a suppressed notification later. A call that would
    take the topic past the client's TOPIC_SUBSCRIBERS_MAX is refused whole (LimitExceeded)."""
    topic = topic_for_client(client=client, key=key)
    if not 1 <= len(user_ids) <= MAX_SUBSCRIBE:
        raise ValidationFailed(f"user_ids is a list of 1 to {MAX_SUBSCRIBE} user ids", extra={"field": "user_ids"})
    wanted = list(dict.fromkeys(user_ids))
    known = recipient_ids_by_user_id(client=client, user_ids=wanted)
    unknown = [user_id for user_id in wanted if user_id not in known]
    if unknown:
        raise ValidationFailed(
            f"{len(unknown)} user id(s) name no stored recipient; store them first with PUT /api/v1/recipients/{{user_id}}",
            extra={"field": "user_ids", "details": {"unknown_user_ids": unknown}},
        )
    now = timezone.now()
    rows = [{"topic_id": topic.pk, "recipient_id": known[user_id], "created_at": now} for user_id in wanted]
    with transaction.atomic():
        # The topic's row lock makes concurrent subscribes to it count one after the other, so
        # two can never both pass the limit; the count taken after the insert is the answer's.
        # The client's own limit is read with it.
        locked = Topic.objects.select_for_update(of=("self",)).filter(pk=topic.pk)
        own_limit = locked.values_list("client__topic_subscribers_max", flat=True).first()
        added = insert_rows_or_nothing(TopicSubscription, rows, conflict_fields=("topic_id", "recipient_id"), returning="id")
        count = topic_subscriber_count(topic_id=topic.pk)
        if added:
            topic_subscribers_check(own_limit=own_limit, subscribers=count)  # raising rolls the insert back
    return SubscribeResult(added=len(added), subscriber_count=count)


def topic_unsubscribe(*, client: ApiClient, key: str, user_id: str) -> bool:
    """Take ``user_id`` off the topic; True when it was on it (idempotent either way)."""
    topic = topic_for_client(client=client, key=key)
    deleted, _ = TopicSubscription.objects.filter(topic=topic, recipient__client=client, recipient__user_id=user_id).delete()
    return bool(deleted)
