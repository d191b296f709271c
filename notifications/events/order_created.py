"""The ``order.created`` event: decode and validate its body; its message is the platform template
``order_created`` (seeded by migration 0006, edited in the admin), rendered at accept."""

from __future__ import annotations

import decimal
import json
import math
from dataclasses import dataclass
from typing import Any

from .. import services
from ..channels import CHANNEL_NAMES, validate_address
from ..errors import NotificationError
from .registry import DecodedEvent, EventHandler, MalformedEvent, register

ROUTING_KEY = "order.created"
TEMPLATE_KEY = "order_created"


@dataclass(frozen=True)
class OrderCreated:
    order_id: int | str
    project_id: int | str
    description: str
    amount: float
    user_id: str
    email: str = ""
    channel: str = "email"

    @property
    def key(self) -> str:
        return f"order.created:{self.order_id}"


def _is_number(value: Any) -> bool:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    try:  # an integer too big for a float overflows instead of being "not finite"
        return math.isfinite(float(value))
    except OverflowError:
        return False


def _is_id(value: Any) -> bool:
    return (isinstance(value, int) and not isinstance(value, bool)) or (isinstance(value, str) and bool(value.strip()))


def decode_order_created(body: bytes) -> OrderCreated:
    """Parse and validate an ``order.created`` body; MalformedEvent says what is wrong."""
    try:
        # Strictly UTF-8 (RFC 8259): json.loads on bytes would also guess UTF-16 and UTF-32.
        text = body.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise MalformedEvent(f"body is not UTF-8: {exc}") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise MalformedEvent(f"body is not JSON: {exc}") from None
    except (RecursionError, ValueError) as exc:
        # Nesting too deep (or an integer literal too long): the same every time, so not transient.
        raise MalformedEvent(f"body is not usable JSON: {type(exc).__name__}") from None
    if not isinstance(data, dict):
        raise MalformedEvent("body is not a JSON object")
    problems = []
    for name in ("order_id", "project_id"):
        if name not in data:
            problems.append(f"{name} is missing")
        elif not _is_id(data[name]):
            problems.append(f"{name} must be an integer or a non-empty string")
    for name in ("description", "user_id"):
        if name not in data:
            problems.append(f"{name} is missing")
        elif not isinstance(data[name], str) or (name == "user_id" and not data[name].strip()):
            problems.append(f"{name} must be a {'non-empty ' if name == 'user_id' else ''}string")
    if "amount" not in data:
        problems.append("amount is missing")
    elif not _is_number(data["amount"]):
        problems.append("amount must be a number")
    email = data.get("email") or ""
    channel = data.get("channel") or "email"
    if not isinstance(email, str):
        problems.append("email must be a string")
    if not isinstance(channel, str) or channel not in CHANNEL_NAMES:
        problems.append(f"channel must be one of {', '.join(CHANNEL_NAMES)}")
    elif email and channel != "email":
        problems.append("email is given but channel is not email")
    elif isinstance(email, str) and email:
        try:
            validate_address("email", email, field="email")
        except NotificationError as exc:
            problems.append(exc.message)
    if problems:
        raise MalformedEvent("; ".join(problems))
    return OrderCreated(
        order_id=data["order_id"],
        project_id=data["project_id"],
        description=data["description"],
        amount=float(data["amount"]),
        user_id=data["user_id"].strip(),
        email=email.strip(),
        channel=channel,
    )


def order_created_data(event: OrderCreated) -> dict[str, Any]:
    """The template's variables: the event's fields, the amount with two decimals."""
    amount = decimal.Decimal(str(event.amount)).quantize(decimal.Decimal("0.01"), rounding=decimal.ROUND_HALF_UP)
    return {"order_id": event.order_id, "project_id": event.project_id, "description": event.description, "amount": str(amount)}


def order_created_decode(body: bytes, routing_key: str) -> DecodedEvent:
    event = decode_order_created(body)
    request = services.NotificationRequest(
        user_id=event.user_id,
        template=TEMPLATE_KEY,
        data=order_created_data(event),
        channel=event.channel,
        to=event.email,
        metadata={"order_id": event.order_id, "project_id": event.project_id, "event": routing_key},
    )
    return DecodedEvent(key=event.key, request=request)


register(EventHandler(routing_key=ROUTING_KEY, decode=order_created_decode))
