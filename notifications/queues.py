"""The broker's queues and the actor each delivers to, by name: the actors declare themselves with
these names, and services enqueue by them without importing the actors."""

from __future__ import annotations

from dataclasses import dataclass

# Delivery messages go to one queue per priority, addressed to its actor by name.
HIGH_QUEUE = "notifications.high"
BULK_QUEUE = "notifications.bulk"


@dataclass(frozen=True)
class DeliveryRoute:
    queue_name: str
    actor_name: str


DELIVERY_ROUTES = {
    "high": DeliveryRoute(HIGH_QUEUE, "deliver_notification"),
    "bulk": DeliveryRoute(BULK_QUEUE, "deliver_bulk_notification"),
}


def delivery_route(priority: str) -> DeliveryRoute:
    return DELIVERY_ROUTES.get(priority, DELIVERY_ROUTES["high"])


# Status events (a client's status webhooks) have a queue of their own, so a backlog of bulk sends
# never delays them, nor they a send.
STATUS_EVENT_QUEUE = "notifications.status"
STATUS_EVENT_ROUTE = DeliveryRoute(STATUS_EVENT_QUEUE, "deliver_status_event")

# A broadcast's fan-out (making its notifications, batch by batch) has a queue of its own: a long
# fan-out never sits in front of a send, and the sends it makes start while it goes on.
BROADCAST_QUEUE = "notifications.broadcasts"
BROADCAST_FAN_OUT_ROUTE = DeliveryRoute(BROADCAST_QUEUE, "fan_out_broadcast")

# A digest's close at its window's end: short work, on the high queue every worker consumes.
DIGEST_CLOSE_ROUTE = DeliveryRoute(HIGH_QUEUE, "close_digest")
