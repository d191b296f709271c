"""Data and its invariants, one module per family: clients and recipients, content (categories,
templates), notifications with their statuses and attempts, and records (idempotency keys, dead
letters, processed events). Everything is importable from ``notifications.models``."""

from __future__ import annotations

from .backlog import BacklogClaim
from .broadcasts import Broadcast, BroadcastStatus, Topic, TopicSubscription
from .captured import CapturedMessage
from .claims import Claim, ClientSnapshot
from .clients import (
    LIVE_TOKEN_PREFIX,
    TEST_TOKEN_PREFIX,
    ApiClient,
    Recipient,
    hash_token,
    webhook_secret_generate,
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
from .inbox import (
    InboxCounter,
    InboxCounts,
    InboxEvent,
    InboxEventType,
    InboxItem,
    InboxTokenGate,
    counted,
    inbox_item_fields,
)
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
from .outcome_counts import (
    LATENCY_BEYOND_MS,
    LATENCY_BOUNDS_MS,
    OUTCOME_COUNT_KEY,
    OUTCOME_COUNT_SHARDS,
    OutcomeCount,
    hour_of,
    latency_bucket_ms,
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
from .rows import model_instances
from .status_events import StatusEvent, StatusEventState, StatusEventType
from .suppressions import Suppression, SuppressionReason

__all__ = [
    "model_instances",
    "InboxCounter",
    "InboxCounts",
    "InboxEvent",
    "InboxEventType",
    "InboxItem",
    "InboxTokenGate",
    "counted",
    "inbox_item_fields",
    "ApiClient",
    "AttemptOutcome",
    "BacklogClaim",
    "Broadcast",
    "BroadcastStatus",
    "CapturedMessage",
    "Category",
    "Channel",
    "Claim",
    "ClientSnapshot",
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
    "LIVE_TOKEN_PREFIX",
    "IdempotencyKeyState",
    "LATENCY_BEYOND_MS",
    "LATENCY_BOUNDS_MS",
    "Notification",
    "NotificationTemplate",
    "OUTCOME_COUNT_KEY",
    "OUTCOME_COUNT_SHARDS",
    "OutcomeCount",
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
    "TEST_TOKEN_PREFIX",
    "TRANSITIONS",
    "UNCLOSED_DIGEST_STATUSES",
    "TemplateVariant",
    "Topic",
    "TopicSubscription",
    "hash_token",
    "hour_of",
    "latency_bucket_ms",
    "webhook_secret_generate",
    "sources_of",
]
