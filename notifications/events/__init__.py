"""Domain events from RabbitMQ turned into notifications.

``transport`` consumes (and knows no event type); ``processing`` runs one event through its
handler, found in ``registry`` by routing key; one module per event type registers its handler
(``order_created``); ``dead_letters`` records what lands in the DLQ; ``redeliveries`` remembers
counts and rejection reasons between deliveries. To add an event type, add a module like
``order_created.py`` and import it here.
"""

from __future__ import annotations

from django.core.cache import cache

from ..event_bus import declare_topology, event_publish
from . import order_created, processing, transport
from .dead_letters import dead_letter_ingest, json_safe
from .order_created import OrderCreated, decode_order_created, order_created_data
from .processing import ProcessResult, event_process, traceparent_link
from .redeliveries import BoundedMap, RedeliveryCounter, RejectionNotes, message_identity, rejection_notes
from .registry import MalformedEvent, decode_event, handler_for
from .transport import EventConsumer, reconnect_delays

__all__ = [
    "BoundedMap",
    "EventConsumer",
    "MalformedEvent",
    "OrderCreated",
    "ProcessResult",
    "RedeliveryCounter",
    "RejectionNotes",
    "cache",
    "dead_letter_ingest",
    "declare_topology",
    "decode_event",
    "decode_order_created",
    "event_process",
    "event_publish",
    "handler_for",
    "json_safe",
    "message_identity",
    "order_created",
    "processing",
    "reconnect_delays",
    "rejection_notes",
    "order_created_data",
    "traceparent_link",
    "transport",
]
