"""The events exchange on RabbitMQ: its topology and a confirmed publish. Used by the event
consumer, ``manage.py publish_event`` and the republish of an event dead letter."""

from __future__ import annotations

import contextlib
from typing import Any

import pika

from .conf import EventsConfig, broker_connection_parameters, get_config


def declare_topology(channel: Any, config: EventsConfig | None = None) -> None:
    """Declare exchanges, queues and bindings; idempotent, so every consumer and publisher does it."""
    config = config or get_config().events
    channel.exchange_declare(exchange=config.exchange, exchange_type="topic", durable=True)
    channel.exchange_declare(exchange=config.dlx, exchange_type="fanout", durable=True)
    arguments: dict[str, Any] = {"x-dead-letter-exchange": config.dlx}
    dlq_arguments: dict[str, Any] = {}
    if config.quorum_queues:
        # RabbitMQ dead-letters by itself past the limit; our own count usually gets there first.
        arguments.update({"x-queue-type": "quorum", "x-delivery-limit": config.max_redeliveries + 1})
        dlq_arguments["x-queue-type"] = "quorum"
    channel.queue_declare(queue=config.queue, durable=True, arguments=arguments)
    channel.queue_bind(queue=config.queue, exchange=config.exchange, routing_key=config.routing_key)
    channel.queue_declare(queue=config.dlq, durable=True, arguments=dlq_arguments)
    channel.queue_bind(queue=config.dlq, exchange=config.dlx)


def event_publish(
    *,
    body: bytes,
    routing_key: str | None = None,
    headers: dict[str, Any] | None = None,
    message_id: str | None = None,
) -> None:
    """Publish one persistent event to the events exchange with publisher confirms."""
    config = get_config().events
    with contextlib.closing(pika.BlockingConnection(broker_connection_parameters())) as conn:
        channel = conn.channel()
        channel.confirm_delivery()
        declare_topology(channel, config)
        channel.basic_publish(
            exchange=config.exchange,
            routing_key=routing_key or config.routing_key,
            body=body,
            properties=pika.BasicProperties(
                delivery_mode=pika.DeliveryMode.Persistent,
                content_type="application/json",
                message_id=message_id,
                headers=headers or None,
            ),
            mandatory=True,
        )
