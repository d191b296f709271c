"""Publish one domain event to the events exchange, for trying the consumer by hand."""

from __future__ import annotations

import json
import uuid
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser

from notifications.event_bus import event_publish


class Command(BaseCommand):
    help = "Publish an order.created event (persistent, with publisher confirms) to the events exchange."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("event_type", choices=["order.created"], help="The routing key.")
        parser.add_argument("--order-id", type=int)
        parser.add_argument("--project-id", type=int)
        parser.add_argument("--user-id")
        parser.add_argument("--amount", type=float)
        parser.add_argument("--description", default="")
        parser.add_argument("--email", default=None, help="Send to this address instead of the stored one.")
        parser.add_argument("--channel", default=None, help="email (default), sms, push or webhook.")
        parser.add_argument("--traceparent", default=None, help="A W3C traceparent header to link to.")
        parser.add_argument("--raw", default=None, help="Publish this body as it is (e.g. to try a malformed event).")

    def handle(self, *args: Any, event_type: str, raw: str | None, traceparent: str | None, **options: Any) -> None:
        if settings.BROKER_IS_EMBEDDED:
            raise CommandError("publish_event needs RabbitMQ: set BROKER_URL=amqp://user:pass@host:5672/vhost")
        if raw is not None:
            body = raw.encode()
        else:
            missing = [
                f"--{name.replace('_', '-')}" for name in ("order_id", "project_id", "user_id", "amount") if options[name] is None
            ]
            if missing:
                raise CommandError(f"missing {', '.join(missing)} (or give the whole body with --raw)")
            event: dict[str, Any] = {
                "order_id": options["order_id"],
                "project_id": options["project_id"],
                "user_id": options["user_id"],
                "amount": options["amount"],
                "description": options["description"],
            }
            for name in ("email", "channel"):
                if options[name]:
                    event[name] = options[name]
            body = json.dumps(event).encode()
        message_id = str(uuid.uuid4())
        event_publish(
            body=body,
            routing_key=event_type,
            headers={"traceparent": traceparent} if traceparent else None,
            message_id=message_id,
        )
        self.stdout.write(f"published {event_type} {message_id}: {body.decode(errors='replace')}")
