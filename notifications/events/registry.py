"""The event types the consumer knows: one handler per routing key, registered by its module."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from .. import services


class MalformedEvent(Exception):
    """The message can never be processed as it is; the text says why."""


@dataclass(frozen=True)
class DecodedEvent:
    """What a handler made of a message body: its dedup key and the notification it asks for."""

    key: str
    request: services.NotificationRequest


@dataclass(frozen=True)
class EventHandler:
    """Decodes and validates one event type's body (MalformedEvent says what is wrong) into the
    notification request it stands for; ``routing_key`` is the event type."""

    routing_key: str
    decode: Callable[[bytes, str], DecodedEvent]


_handlers: dict[str, EventHandler] = {}


def register(handler: EventHandler) -> EventHandler:
    _handlers[handler.routing_key] = handler
    return handler


def handler_for(routing_key: str) -> EventHandler:
    try:
        return _handlers[routing_key]
    except KeyError:
        known = ", ".join(sorted(_handlers)) or "none"
        raise MalformedEvent(f"no handler for events with routing key {routing_key!r} (known: {known})") from None


def decode_event(body: bytes, routing_key: str) -> DecodedEvent:
    return handler_for(routing_key).decode(body, routing_key)


def registered_routing_keys() -> list[str]:
    return sorted(_handlers)
