"""The domain operations, one module per capability. Views, actors, admin actions, commands and
the event consumer all call these functions, and nothing else writes notifications.

The database row is the outbox: a notification's status, ``next_attempt_at`` and ``enqueued_at``
say everything about where it is, so anything the broker loses (a publish during an outage, a
delayed message dropped by dramatiq #545, a worker killed mid-send) is found again by
:func:`notification_sweep`. A broker message is only ever a hint to look at a row now; the claim
in :func:`notification_deliver` makes a duplicate hint harmless.

Modules point one way: ``accept`` and ``dead_letters`` -> ``outbox``; ``sweeper`` -> ``outcomes``
-> ``dead_letters``; ``delivery`` -> ``outcomes``. None imports the actors, the events or the API.
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
from .delivery import DeliveryOutcome, SendRateLimited, notification_deliver
from .event_intake import EventIntake, event_notification_accept
from .outbox import delivery_message_send, notification_enqueue
from .outcomes import retry_delay_seconds
from .retention import PurgeReport, notification_purge
from .sweeper import SweepReport, notification_sweep

__all__ = [
    "RECIPIENT_FIELDS",
    "AcceptResult",
    "BatchItem",
    "DeliveryOutcome",
    "EventIntake",
    "NotificationRequest",
    "PurgeReport",
    "RedriveResult",
    "SendRateLimited",
    "SweepReport",
    "api_client_create",
    "api_client_get_or_create",
    "api_client_revoke",
    "api_client_rotate_token",
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
    "notification_enqueue",
    "notification_purge",
    "notification_sweep",
    "recipient_delete",
    "recipient_upsert",
    "request_fingerprint",
    "retry_delay_seconds",
]
