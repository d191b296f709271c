"""Many Dramatiq messages to RabbitMQ in one round trip: an AMQP transaction (``tx.select`` once
per thread's channel, the publishes, one ``tx.commit``) instead of a publisher confirm per message.
``tx.commit`` answers only when RabbitMQ has taken every message of the batch (written to disk for
persistent messages on durable queues), so a batch is as safe as confirms, at one wait for all.
On another broker (the embedded StubBroker) each message is enqueued as usual."""

from __future__ import annotations

import contextlib
import threading
from typing import Any

import dramatiq
import pika
import pika.exceptions
from dramatiq.brokers.rabbitmq import RabbitmqBroker

_local = threading.local()


def _transaction_channel(broker: RabbitmqBroker) -> Any:
    """This thread's channel in transaction mode, on the broker's (thread-local) connection."""
    connection = broker.connection
    held = getattr(_local, "held", None)
    if held is not None and held[0] is connection and held[1].is_open:
        return held[1]
    channel = connection.channel()
    channel.tx_select()
    _local.held = (connection, channel)
    return channel


def messages_publish(broker: dramatiq.Broker, messages: list[dramatiq.Message[Any]]) -> None:
    """Publish ``messages`` (each to its own queue, no delay) as one unit: all or, on an error,
    none that the caller may count on (it raises, and the rows stay for the sweeper)."""
    if not isinstance(broker, RabbitmqBroker):
        for message in messages:
            broker.enqueue(message)
        return
    for queue_name in {message.queue_name for message in messages}:
        broker.declare_queue(queue_name, ensure=True)
    try:
        channel = _transaction_channel(broker)
        for message in messages:
            broker.emit_before("enqueue", message, None)
            channel.basic_publish(
                exchange="",
                routing_key=message.queue_name,
                body=message.encode(),
                properties=pika.BasicProperties(delivery_mode=2, priority=message.options.get("broker_priority")),
            )
        channel.tx_commit()
    except (pika.exceptions.AMQPConnectionError, pika.exceptions.AMQPChannelError):
        # A broken channel or connection: the next batch starts on fresh ones.
        _local.held = None
        del broker.connection
        raise
    except Exception:
        # Publishes of this batch must not ride along with the next batch's commit: their rows
        # were handed back to the sweeper.
        with contextlib.suppress(Exception):
            channel.tx_rollback()
        raise
    for message in messages:
        broker.emit_after("enqueue", message, None)
