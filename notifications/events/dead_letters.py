"""Messages found in the DLQ, recorded as DeadLetter rows (what the admin's DLQ shows).

Dead letters become rows by *consuming* ``notifications.dlq``, not by writing a row at nack time:
the nack then never depends on the database (which is down in exactly the redelivery-limit case),
RabbitMQ's own dead-lettering (a quorum queue's delivery limit, another consumer's reject) is
recorded too, and a DLQ message is acked only after its row is committed, so nothing is lost while
PostgreSQL is away. The consumer that nacks a message knows why, and notes the reason and error at
nack time (:class:`RejectionNotes`); the row's reason comes from that note. Without one it falls
back on ``x-death`` and the body: RabbitMQ's own ``delivery_limit`` is the redelivery limit; a body
that does not validate is a poison message with the validation error; a valid body rejected for a
reason nobody noted is a poison message with an error that says only that (never a guessed
redelivery limit). Headers are read defensively: anyone can publish to the DLQ, and a header that
is not what RabbitMQ writes must not stop the consumer. A crash between that commit and the ack can
record one message twice.
"""

from __future__ import annotations

import datetime as dt
import decimal
from typing import Any

from .. import services
from ..models import DeadLetter, DeadLetterReason
from .redeliveries import message_identity, rejection_notes
from .registry import MalformedEvent, decode_event


def _text_safe(text: str) -> str:
    # PostgreSQL text and jsonb cannot hold NUL, which a UTF-16 body is full of.
    return text.replace("\x00", "\ufffd")


def json_safe(value: Any) -> Any:
    """AMQP header values (bytes, timestamps, decimals, nested tables) as JSON."""
    if isinstance(value, dict):
        return {_text_safe(str(k)): json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [json_safe(v) for v in value]
    if isinstance(value, bytes):
        value = value.decode("utf-8", errors="replace")
    if isinstance(value, str):
        return _text_safe(value)
    if isinstance(value, dt.datetime):
        return value.isoformat()
    if isinstance(value, decimal.Decimal):
        return str(value)
    if isinstance(value, float) and (value != value or value in (float("inf"), float("-inf"))):
        return str(value)  # jsonb has no NaN or Infinity
    return value


def _as_text(value: Any) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


def _as_count(*values: Any) -> int:
    """The first of ``values`` that is a sensible count (x-delivery-count, x-death's count)."""
    for value in values:
        try:
            count = int(value)
        except (TypeError, ValueError, OverflowError):
            continue
        if 0 < count < 2**31:
            return count
    return 1


def _dead_letter_reason(
    *, body: bytes, routing_key: str, death: dict[str, Any], noted: tuple[str, str] | None
) -> tuple[str, str]:
    death_reason = death.get("reason")
    if death_reason is not None:
        death_reason = _as_text(death_reason)
    if death_reason == "delivery_limit":  # RabbitMQ's own count (quorum queues) says so
        return DeadLetterReason.REDELIVERY_LIMIT, (noted[1] if noted else "") or "redelivered too many times (delivery limit)"
    if noted is not None and death_reason in (None, "rejected"):
        return noted
    try:
        decode_event(body, routing_key)
    except MalformedEvent as exc:
        return DeadLetterReason.POISON_MESSAGE, str(exc)
    if death_reason in (None, "rejected"):
        # Valid, yet rejected, and the why was not noted (say the cache was down across a
        # restart): the consumer's log has it. Guessing the redelivery limit would mislead.
        return DeadLetterReason.POISON_MESSAGE, "rejected by the consumer; see its log"
    return DeadLetterReason.POISON_MESSAGE, f"dead-lettered by RabbitMQ ({death_reason}) before it was processed"


def dead_letter_ingest(
    *, body: bytes, routing_key: str, headers: dict[str, Any] | None, message_id: str | None = None
) -> DeadLetter:
    """Record a message found in the DLQ as a DeadLetter row; see the module docstring."""
    headers = headers if isinstance(headers, dict) else {}
    deaths = headers.get("x-death")
    death = deaths[0] if isinstance(deaths, list | tuple) and deaths and isinstance(deaths[0], dict) else {}
    original_keys = death.get("routing-keys")
    original_key = original_keys[0] if isinstance(original_keys, list | tuple) and original_keys else routing_key
    original_key = _as_text(original_key)
    identity = message_identity(body=body, routing_key=original_key, message_id=message_id)
    reason, error = _dead_letter_reason(body=body, routing_key=original_key, death=death, noted=rejection_notes().get(identity))
    return services.dead_letter_record_event(
        reason=reason,
        error=_text_safe(error),
        attempts=_as_count(headers.get("x-delivery-count"), death.get("count")),
        raw_body=_text_safe(body.decode("utf-8", errors="replace")),
        routing_key=_text_safe(original_key),
        headers=json_safe(headers),
    )


def dead_letter_ingest_unreadable(*, body: bytes, routing_key: str, error: BaseException) -> DeadLetter:
    """Last resort for a DLQ message whose recording failed for a reason of its own (headers the
    database refuses, say): keep what can be kept, the body and why, and drop the headers."""
    return services.dead_letter_record_event(
        reason=DeadLetterReason.POISON_MESSAGE,
        error=_text_safe(f"could not record this dead letter as it came ({type(error).__name__}: {error}); headers dropped"),
        attempts=1,
        raw_body=_text_safe(body.decode("utf-8", errors="replace")),
        routing_key=_text_safe(_as_text(routing_key)),
        headers={},
    )
