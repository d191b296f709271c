"""Many Dramatiq messages to RabbitMQ in one round trip: an AMQP transaction (``tx.select`` once
per thread's channel, the publishes, one ``tx.commit``) instead of a publisher confirm per message.

What RabbitMQ guarantees here (its "Broker Semantics" page): a transaction is a batch, not an
atomic unit. ``tx.commit-ok`` means every message of the batch that could be routed has been taken
(written for persistent messages on durable queues); atomicity holds neither across queues nor
within one. A message whose queue no longer exists is dropped by the routing, not refused by the
commit: so every message is published ``mandatory`` and RabbitMQ hands an unroutable one back
(``basic.return``, sent on commit, before ``commit-ok``). A returned message's queue is declared
again and the message published once more; one still returned after that makes the call raise, so
the caller leaves its rows for the sweeper (which publishes through here too). Nothing is lost
silently. On another broker (the embedded StubBroker) each message is enqueued as usual."""

from __future__ import annotations

import contextlib
import threading
from typing import Any

import dramatiq
import pika
import pika.exceptions
from dramatiq.brokers.rabbitmq import RabbitmqBroker
from dramatiq.common import q_name

_local = threading.local()

# One batch, then its returned messages once more after their queues are declared again.
_PUBLISH_ROUNDS = 2


class MessagesReturned(Exception):
    """RabbitMQ routed some messages of a batch nowhere, even after their queues were declared again."""

    def __init__(self, messages: list[dramatiq.Message[Any]]) -> None:
        self.messages = messages
        queues = sorted({message.queue_name for message in messages})
        super().__init__(f"{len(messages)} message(s) returned unroutable by RabbitMQ (queues: {', '.join(queues)})")


class _TransactionChannel:
    """A thread's channel in transaction mode, with the messages RabbitMQ returned to it."""

    def __init__(self, connection: Any) -> None:
        self.connection = connection
        self.channel = connection.channel()
        self.channel.tx_select()
        self.returned: list[str] = []  # message ids, from basic.return
        self.channel.add_on_return_callback(self._on_return)

    def _on_return(self, _channel: Any, _method: Any, properties: pika.BasicProperties, _body: bytes) -> None:
        self.returned.append(properties.message_id)


def _transaction_channel(broker: RabbitmqBroker) -> _TransactionChannel:
    """This thread's transaction channel, on the broker's (thread-local) connection."""
    connection = broker.connection
    held = getattr(_local, "held", None)
    if held is not None and held.connection is connection and held.channel.is_open:
        return held
    held = _TransactionChannel(connection)
    _local.held = held
    return held


def messages_publish(broker: dramatiq.Broker, messages: list[dramatiq.Message[Any]]) -> None:
    """Publish ``messages`` (each to its own queue, no delay) in one round trip. When it returns,
    RabbitMQ has taken every one; when it raises, the caller may count on none (the rows stay for
    the sweeper), though some may have gone: a delivery message is only a hint, and a worker
    claims a row once whatever number of messages name it."""
    if not isinstance(broker, RabbitmqBroker):
        for message in messages:
            broker.enqueue(message)
        return
    pending = messages
    for _ in range(_PUBLISH_ROUNDS):
        pending = _publish_round(broker, pending)
        if not pending:
            break
        # RabbitMQ routed these nowhere: their queue was deleted since this process declared it.
        # Declare it again (dramatiq does the same on an unroutable enqueue) and publish once more.
        for message in pending:
            broker.queues_pending.add(q_name(message.queue_name))
    if pending:
        raise MessagesReturned(pending)
    for message in messages:
        broker.emit_after("enqueue", message, None)


def _publish_round(broker: RabbitmqBroker, messages: list[dramatiq.Message[Any]]) -> list[dramatiq.Message[Any]]:
    """One transaction of ``messages``; those RabbitMQ returned as unroutable."""
    for queue_name in {message.queue_name for message in messages}:
        broker.declare_queue(queue_name, ensure=True)
    held = None
    try:
        held = _transaction_channel(broker)
        held.returned.clear()
        for message in messages:
            broker.emit_before("enqueue", message, None)
            held.channel.basic_publish(
                exchange="",
                routing_key=message.queue_name,
                body=message.encode(),
                properties=pika.BasicProperties(
                    delivery_mode=2, priority=message.options.get("broker_priority"), message_id=message.message_id
                ),
                mandatory=True,
            )
        held.channel.tx_commit()
        # basic.return frames arrive before commit-ok; pika queues them as events of the channel,
        # dispatched (to _on_return) by this call, which waits for nothing more.
        held.connection.process_data_events(time_limit=0)
    except (pika.exceptions.AMQPConnectionError, pika.exceptions.AMQPChannelError):
        # A broken channel or connection: the next batch starts on fresh ones.
        _local.held = None
        del broker.connection
        raise
    except Exception:
        # Publishes of this batch must not ride along with the next batch's commit: their rows
        # were handed back to the sweeper.
        if held is not None:
            with contextlib.suppress(Exception):
                held.channel.tx_rollback()
        raise
    returned = set(held.returned)
    return [message for message in messages if message.message_id in returned]
