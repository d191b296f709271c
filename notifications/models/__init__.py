"""Data and its invariants, one module per family: clients and recipients, content (categories,
templates), notifications with their statuses and attempts, and records (idempotency keys, dead
letters, processed events). Everything is importable from ``notifications.models``."""

from __future__ import annotations

from .backlog import BacklogClaim
from .broadcasts import Broadcast, BroadcastStatus, Topic, TopicSubscription
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
from .digests import UNCLOSED_DIGEST_STATUSES, Digest, DigestStatus
from .notifications import (
    FINISHED_STATUSES,
    PENDING_STATUSES,
    PROVIDER_STATUS_RANK,
    TRANSITIONS,
    AttemptOutcome,
    DeliveryAttempt,
    Notification,
    Priority,
    ProviderStatus,
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
from .status_events import StatusEvent, StatusEventState, StatusEventType
from .suppressions import Suppression, SuppressionReason

__all__ = [
    "ApiClient",
    "AttemptOutcome",
    "BacklogClaim",
    "Broadcast",
    "BroadcastStatus",
    "Category",
    "Channel",
    "ClientOrPlatformKeyed",
    "DEFAULT_CATEGORY",
    "DeadLetter",
    "DeadLetterReason",
    "DeadLetterSource",
    "DeliveryAttempt",
    "Digest",
    "DigestStatus",
    "FINISHED_STATUSES",
    "IdempotencyKey",
    "IdempotencyKeyState",
    "Notification",
    "NotificationTemplate",
    "PENDING_STATUSES",
    "PROVIDER_STATUS_RANK",
    "Priority",
    "ProcessedEvent",
    "ProviderStatus",
    "Recipient",
    "Resolution",
    "Status",
    "StatusEvent",
    "StatusEventState",
    "StatusEventType",
    "SuppressedReason",
    "Suppression",
    "SuppressionReason",
    "TRANSITIONS",
    "UNCLOSED_DIGEST_STATUSES",
    "TemplateVariant",
    "Topic",
    "TopicSubscription",
    "hash_token",
    "sources_of",
]
