"""Categories and recipients' preferences: what a recipient agreed to receive, and on which channel."""

from __future__ import annotations

import re
from typing import Any

from django.db import IntegrityError, transaction
from django.utils import timezone

from ...channels import CHANNEL_NAMES
from ...errors import ValidationFailed
from ...models import ApiClient, Category, Recipient, SuppressedReason
from ...selectors import category_get, category_keys_known
from .caps import recipient_cap_check

# Per recipient; a preference per category and channel of a large catalogue still fits.
MAX_PREFERENCE_CATEGORIES = 500


def key_check(key: str, *, field: str, max_length: int = 64) -> str:
    """A category or template key: a slug (letters, digits, ``-``, ``_``)."""
    if not (1 <= len(key) <= max_length) or not re.match(r"^[-a-zA-Z0-9_]+$", key):
        raise ValidationFailed(f"a {field} key is 1 to {max_length} letters, digits, '-' or '_'", extra={"field": field})
    return key


def category_upsert(
    *, client: ApiClient, key: str, critical: bool, default_enabled: bool, max_per_recipient: Any = None
) -> tuple[Category, bool]:
    """Create or replace the client's category ``key``. A platform category of that key stays as it
    is for every other client; this client's own now shadows it. ``max_per_recipient``: see services/policy/caps.py."""
    key_check(key, field="category")
    values = {
        "critical": critical,
        "default_enabled": default_enabled,
        "max_per_recipient": recipient_cap_check(max_per_recipient),
    }
    try:
        with transaction.atomic():
            return Category.objects.update_or_create(client=client, key=key, defaults=values)
    except IntegrityError:  # a concurrent PUT of the same new key created it first
        return Category.objects.update_or_create(client=client, key=key, defaults=values)


def category_for_client(*, client: ApiClient, key: str) -> Category:
    """The category a notification of ``client`` names; ValidationFailed naming ``category``."""
    category = category_get(client=client, key=key)
    if category is None:
        raise ValidationFailed(
            f"unknown category {key!r}: create it with PUT /api/v1/categories/{key}", extra={"field": "category"}
        )
    return category


def suppressed_reason(*, category: Category, channel: str, preferences: dict[str, Any]) -> str:
    """Why the recipient's ``preferences`` forbid ``channel`` for ``category``; "" when they allow it.

    Most specific first: category+channel, category, channel, then the category's default. A
    critical category is always allowed (security codes must arrive). See docs/api.md's table.
    """
    if category.critical:
        return ""
    entry = (preferences.get("categories") or {}).get(category.key)
    if isinstance(entry, dict) and channel in entry:
        if entry[channel]:
            return ""
        one_click = {"category": category.key, "channel": channel}
        unsubscribed = any(_pair(mark) == one_click for mark in preferences.get("unsubscribed") or [])
        return SuppressedReason.UNSUBSCRIBED if unsubscribed else SuppressedReason.PREFERENCE
    if isinstance(entry, bool):
        return "" if entry else SuppressedReason.PREFERENCE
    by_channel = (preferences.get("channels") or {}).get(channel)
    if isinstance(by_channel, bool):
        return "" if by_channel else SuppressedReason.PREFERENCE
    return "" if category.default_enabled else SuppressedReason.DEFAULT_OFF


def _pair(mark: Any) -> dict[str, Any]:
    return {"category": mark.get("category"), "channel": mark.get("channel")} if isinstance(mark, dict) else {}


def preferences_check(*, client: ApiClient, channels: Any, categories: Any) -> tuple[dict[str, bool], dict[str, Any]]:
    """The ``channels`` and ``categories`` of a preferences document, checked: known channels and
    categories, booleans or per-channel booleans; ValidationFailed naming the first bad entry."""
    if not isinstance(channels, dict):
        raise ValidationFailed('channels is an object such as {"sms": false}', extra={"field": "channels"})
    if not isinstance(categories, dict):
        raise ValidationFailed(
            'categories is an object such as {"marketing": false, "order_updates": {"sms": false}}',
            extra={"field": "categories"},
        )
    if len(categories) > MAX_PREFERENCE_CATEGORIES:
        raise ValidationFailed(f"at most {MAX_PREFERENCE_CATEGORIES} categories", extra={"field": "categories"})
    for channel, allowed in channels.items():
        _channel_check(channel, allowed, field=f"channels.{channel}")
    for key, entry in categories.items():
        if isinstance(entry, dict):
            for channel, allowed in entry.items():
                _channel_check(channel, allowed, field=f"categories.{key}.{channel}")
        elif not isinstance(entry, bool):
            raise ValidationFailed(
                f'categories.{key} is true, false or an object of channels such as {{"sms": false}}',
                extra={"field": f"categories.{key}"},
            )
    unknown = sorted(set(categories) - category_keys_known(client=client, keys=list(categories)))
    if unknown:
        raise ValidationFailed(f"unknown category {unknown[0]!r}", extra={"field": f"categories.{unknown[0]}"})
    return dict(channels), {key: dict(entry) if isinstance(entry, dict) else entry for key, entry in categories.items()}


def _channel_check(channel: str, allowed: Any, *, field: str) -> None:
    if channel not in CHANNEL_NAMES:
        raise ValidationFailed(f"unknown channel {channel!r}; channels are {', '.join(CHANNEL_NAMES)}", extra={"field": field})
    if not isinstance(allowed, bool):
        raise ValidationFailed(f"{field} is true or false", extra={"field": field})


def recipient_preferences_replace(*, client: ApiClient, user_id: str, channels: Any, categories: Any) -> tuple[Recipient, bool]:
    """Replace the preferences of the client's recipient ``user_id``, creating the recipient (with no
    address) when it has none, since notifications sent with ``to`` have preferences too. A one-click
    unsubscribe stays marked as such only while the new preferences still opt out of that pair."""
    channels, categories = preferences_check(client=client, channels=channels, categories=categories)
    with transaction.atomic():
        recipient, created = _recipient_for_update(client=client, user_id=user_id)
        kept = [
            mark
            for mark in (recipient.preferences or {}).get("unsubscribed") or []
            if isinstance(categories.get(mark.get("category")), dict)
            and categories[mark["category"]].get(mark.get("channel")) is False
        ]
        recipient.preferences = {"channels": channels, "categories": categories, "unsubscribed": kept}
        recipient.save(update_fields=["preferences", "updated_at"])
    return recipient, created


def recipient_unsubscribe(*, client: ApiClient, user_id: str, category_key: str, channel: str) -> Recipient:
    """Opt the recipient out of ``category_key`` on ``channel`` (a one-click unsubscribe), keeping
    every other preference as it means now. Idempotent."""
    with transaction.atomic():
        recipient, _ = _recipient_for_update(client=client, user_id=user_id)
        preferences = dict(recipient.preferences or {})
        categories = dict(preferences.get("categories") or {})
        entry = categories.get(category_key)
        if isinstance(entry, bool):
            # "true" or "false" for every channel: spelt out per channel, so the others keep it.
            entry = dict.fromkeys(CHANNEL_NAMES, entry)
        entry = dict(entry or {})
        entry[channel] = False
        categories[category_key] = entry
        marks = [
            mark
            for mark in preferences.get("unsubscribed") or []
            if _pair(mark) != {"category": category_key, "channel": channel}
        ]
        marks.append({"category": category_key, "channel": channel, "at": timezone.now().isoformat()})
        preferences.update({"channels": preferences.get("channels") or {}, "categories": categories, "unsubscribed": marks})
        recipient.preferences = preferences
        recipient.save(update_fields=["preferences", "updated_at"])
    return recipient


def _recipient_for_update(*, client: ApiClient, user_id: str) -> tuple[Recipient, bool]:
    """The recipient row locked for this transaction, created (no addresses) when missing."""
    recipient = Recipient.objects.select_for_update().filter(client=client, user_id=user_id).first()
    if recipient is not None:
        return recipient, False
    try:
        with transaction.atomic():
            return Recipient.objects.create(client=client, user_id=user_id), True
    except IntegrityError:  # made by a concurrent request since the read
        return Recipient.objects.select_for_update().get(client=client, user_id=user_id), False
