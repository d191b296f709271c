"""Data and its invariants, one module per family: clients and recipients, content (categories,
templates), notifications with their statuses and attempts, and records (idempotency keys, dead
letters, processed events). Everything is importable from ``notifications.models``."""

from __future__ import annotations

from .clients import (
    ApiClient,
    Recipient,
    hash_token,
)
from .content import (
    DEFAULT_CATEGORY,
    Category,
    Channel,
    ClientOrPlatformKeyed,
    NotificationTemplate,
    TemplateVariant,
)
from .notifications import (
    FINISHED_STATUSES,
    PENDING_STATUSES,
    TRANSITIONS,
    AttemptOutcome,
    DeliveryAttempt,
    Notification,
    Priority,
    Status,
    SuppressedReason,
    sources_of,
)
from .records import (
    DeadLetter,
    DeadLetterReason,
    DeadLetterSource,
    IdempotencyKey,
    IdempotencyKeyState,
    ProcessedEvent,
    Resolution,
)

__all__ = [
    "ApiClient",
    "AttemptOutcome",
    "Category",
    "Channel",
    "ClientOrPlatformKeyed",
    "DEFAULT_CATEGORY",
    "DeadLetter",
    "DeadLetterReason",
    "DeadLetterSource",
    "DeliveryAttempt",
    "FINISHED_STATUSES",
    "IdempotencyKey",
    "IdempotencyKeyState",
    "Notification",
    "NotificationTemplate",
    "PENDING_STATUSES",
    "Priority",
    "ProcessedEvent",
    "Recipient",
    "Resolution",
    "Status",
    "SuppressedReason",
    "TRANSITIONS",
    "TemplateVariant",
    "hash_token",
    "sources_of",
]
