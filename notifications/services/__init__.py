"""The domain operations, one module per capability. Views, actors, admin actions, commands and
the event consumer all call these functions, and nothing else writes notifications.

The database row is the outbox: a notification's status, ``next_attempt_at`` and ``enqueued_at``
say everything about where it is, so anything the broker loses (a publish during an outage, a
delayed message dropped by dramatiq #545, a worker killed mid-send) is found again by
:func:`notification_sweep`. A broker message is only ever a hint to look at a row now; the claim
in :func:`notification_deliver` makes a duplicate hint harmless.

The operations live in one folder per stage, layered (import-linter checks it, and that no
service imports the actors, the events or the API), each ``__init__.py`` stating its rule: the
sweeper on top, then fanout/ (topics, broadcasts), intake/ (accept, idempotency, clients),
digests/, delivery/, feedback/, policy/ (content, consent, caps, routes), records/ (outbox,
status events). This module is their facade; docs/architecture.md is the map.
"""

from __future__ import annotations

from ..selectors import address_suppressed_reason, addresses_suppressed_reasons
from .delivery.capture import captured_messages_clear
from .delivery.dead_letters import (
    RedriveResult,
    dead_letter_discard,
    dead_letter_record_event,
    dead_letter_redrive,
    dead_letter_republish,
)
from .delivery.outcomes import retry_delay_seconds
from .delivery.send import DeliveryOutcome, SendRateLimited, notification_deliver, notifications_deliver
from .digests.close import (
    DigestCloseResult,
    digest_close,
    digest_sweep,
)
from .digests.join import (
    DEFAULT_DIGEST_MAX_ITEMS,
    MAX_DIGEST_ITEMS,
    MAX_DIGEST_KEY_LENGTH,
    MAX_DIGEST_WINDOW_SECONDS,
    DigestRequest,
)
from .fanout.broadcast_accept import BroadcastRequest, broadcast_create
from .fanout.broadcasts import (
    broadcast_cancel,
    broadcast_fan_out,
    broadcast_fan_out_batch,
    broadcast_resume_stale,
)
from .fanout.topics import SubscribeResult, topic_key_check, topic_subscribe, topic_unsubscribe, topic_upsert
from .feedback.provider_feedback import (
    CallbackRejected,
    CallbackUnavailable,
    FeedbackResult,
    mailgun_event_record,
    twilio_status_record,
)
from .intake.accept import NotificationRequest, notification_accept, notification_cancel
from .intake.accept_batch import BatchItem, notification_accept_batch
from .intake.accept_group import notification_accept_grouped
from .intake.clients import (
    RECIPIENT_FIELDS,
    api_client_create,
    api_client_get_or_create,
    api_client_limits_set,
    api_client_revoke,
    api_client_rotate_token,
    api_client_test_token_issue,
    recipient_delete,
    recipient_upsert,
)
from .intake.event_intake import EventIntake, event_notification_accept
from .intake.idempotency import AcceptResult, request_fingerprint
from .policy.caps import MAX_CAP_COUNT, MAX_CAP_SECONDS, recipient_cap_check
from .policy.preferences import category_upsert, recipient_preferences_replace
from .policy.quiet_hours import quiet_hours_check, quiet_hours_end, time_zone_check
from .policy.suppressions import suppression_delete, suppression_remove
from .policy.templates import (
    VARIANT_FIELDS,
    RenderedMessage,
    template_preview,
    template_replace,
    template_send_test,
    template_variant_preview,
    template_variants_check,
)
from .policy.unsubscribe import UnsubscribeTarget, unsubscribe_one_click, unsubscribe_target, unsubscribe_url
from .records.client_webhooks import api_client_rotate_webhook_secret, api_client_set_status_webhook_url
from .records.outbox import delivery_message_send, notification_enqueue
from .records.outcome_counts import outcome_counts_rebuild
from .records.retention import PurgeReport, notification_purge
from .records.status_events import (
    status_event_deliver,
    status_event_payload,
    status_event_record,
    status_event_redrive,
)
from .sweeper import SweepReport, notification_sweep

__all__ = [
    "RECIPIENT_FIELDS",
    "VARIANT_FIELDS",
    "AcceptResult",
    "BroadcastRequest",
    "BatchItem",
    "CallbackRejected",
    "CallbackUnavailable",
    "DEFAULT_DIGEST_MAX_ITEMS",
    "MAX_DIGEST_ITEMS",
    "MAX_DIGEST_KEY_LENGTH",
    "MAX_DIGEST_WINDOW_SECONDS",
    "MAX_CAP_COUNT",
    "MAX_CAP_SECONDS",
    "DeliveryOutcome",
    "DigestCloseResult",
    "DigestRequest",
    "EventIntake",
    "FeedbackResult",
    "NotificationRequest",
    "PurgeReport",
    "RedriveResult",
    "RenderedMessage",
    "SendRateLimited",
    "SubscribeResult",
    "SweepReport",
    "UnsubscribeTarget",
    "address_suppressed_reason",
    "addresses_suppressed_reasons",
    "api_client_create",
    "captured_messages_clear",
    "broadcast_cancel",
    "broadcast_create",
    "broadcast_fan_out",
    "broadcast_fan_out_batch",
    "broadcast_resume_stale",
    "api_client_get_or_create",
    "api_client_test_token_issue",
    "api_client_limits_set",
    "api_client_revoke",
    "api_client_rotate_token",
    "api_client_test_token_issue",
    "captured_messages_clear",
    "api_client_rotate_webhook_secret",
    "api_client_set_status_webhook_url",
    "category_upsert",
    "recipient_cap_check",
    "dead_letter_discard",
    "dead_letter_record_event",
    "dead_letter_redrive",
    "dead_letter_republish",
    "digest_close",
    "digest_sweep",
    "delivery_message_send",
    "mailgun_event_record",
    "event_notification_accept",
    "notification_accept",
    "notification_accept_batch",
    "notification_accept_grouped",
    "notification_cancel",
    "notification_deliver",
    "notifications_deliver",
    "notification_enqueue",
    "notification_purge",
    "notification_sweep",
    "quiet_hours_check",
    "quiet_hours_end",
    "recipient_delete",
    "recipient_preferences_replace",
    "recipient_upsert",
    "request_fingerprint",
    "outcome_counts_rebuild",
    "retry_delay_seconds",
    "suppression_delete",
    "suppression_remove",
    "status_event_deliver",
    "status_event_payload",
    "status_event_record",
    "status_event_redrive",
    "template_preview",
    "template_replace",
    "template_send_test",
    "template_variant_preview",
    "template_variants_check",
    "time_zone_check",
    "twilio_status_record",
    "topic_key_check",
    "topic_subscribe",
    "topic_unsubscribe",
    "topic_upsert",
    "unsubscribe_one_click",
    "unsubscribe_target",
    "unsubscribe_url",
]
