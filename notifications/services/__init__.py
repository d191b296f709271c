"""The domain operations, one module per capability. Views, actors, admin actions, commands and
the event consumer all call these functions, and nothing else writes notifications.

The database row is the outbox: a notification's status, ``next_attempt_at`` and ``enqueued_at``
say everything about where it is, so anything the broker loses (a publish during an outage, a
delayed message dropped by dramatiq #545, a worker killed mid-send) is found again by
:func:`notification_sweep`. A broker message is only ever a hint to look at a row now; the claim
in :func:`notification_deliver` makes a duplicate hint harmless.

Modules point one way (import-linter checks there is no cycle among them, and that none imports
the actors, the events or the API): ``accept_batch`` -> ``accept`` -> ``content``/``consent``
-> ``outbox``; ``delivery`` -> ``consent``/``outcomes`` -> ``dead_letters`` -> ``outbox``;
``sweeper`` -> ``outcomes``/``outbox``.
"""

from __future__ import annotations

from .accept import (
    AcceptResult,
    NotificationRequest,
    notification_accept,
    notification_cancel,
    request_fingerprint,
)
from .accept_batch import BatchItem, notification_accept_batch
from .clients import (
    RECIPIENT_FIELDS,
    api_client_create,
    api_client_get_or_create,
    api_client_revoke,
    api_client_rotate_token,
    recipient_delete,
    recipient_upsert,
)
from .dead_letters import RedriveResult, dead_letter_discard, dead_letter_record_event, dead_letter_redrive, dead_letter_republish
from .delivery import DeliveryOutcome, SendRateLimited, notification_deliver, notifications_deliver
from .event_intake import EventIntake, event_notification_accept
from .outbox import delivery_message_send, notification_enqueue
from .outcomes import retry_delay_seconds
from .preferences import category_upsert, recipient_preferences_replace
from .quiet_hours import quiet_hours_check, quiet_hours_end, time_zone_check
from .retention import PurgeReport, notification_purge
from .sweeper import SweepReport, notification_sweep
from .templates import (
    VARIANT_FIELDS,
    RenderedMessage,
    template_preview,
    template_replace,
    template_send_test,
    template_variant_preview,
    template_variants_check,
)
from .unsubscribe import UnsubscribeTarget, unsubscribe_one_click, unsubscribe_target, unsubscribe_url

__all__ = [
    "RECIPIENT_FIELDS",
    "VARIANT_FIELDS",
    "AcceptResult",
    "BatchItem",
    "DeliveryOutcome",
    "EventIntake",
    "NotificationRequest",
    "PurgeReport",
    "RedriveResult",
    "RenderedMessage",
    "SendRateLimited",
    "SweepReport",
    "UnsubscribeTarget",
    "api_client_create",
    "api_client_get_or_create",
    "api_client_revoke",
    "api_client_rotate_token",
    "category_upsert",
    "dead_letter_discard",
    "dead_letter_record_event",
    "dead_letter_redrive",
    "dead_letter_republish",
    "delivery_message_send",
    "event_notification_accept",
    "notification_accept",
    "notification_accept_batch",
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
    "retry_delay_seconds",
    "template_preview",
    "template_replace",
    "template_send_test",
    "template_variant_preview",
    "template_variants_check",
    "time_zone_check",
    "unsubscribe_one_click",
    "unsubscribe_target",
    "unsubscribe_url",
]
