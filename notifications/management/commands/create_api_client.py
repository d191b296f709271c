"""Create an API client (or issue a test token for one) and print the token alone on the last line."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from notifications import services
from notifications.errors import ValidationFailed
from notifications.models import ApiClient


class Command(BaseCommand):
    help = "Create an API client; its bearer token is printed alone on the last line (shown once)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("name")
        parser.add_argument(
            "--rotate",
            action="store_true",
            help="If the client exists (e.g. the events client the consumer made), give it a new token instead.",
        )
        parser.add_argument(
            "--test",
            action="store_true",
            help="Issue a test token (ntf_test_...) for the client, creating the client if missing: its requests run "
            "the whole pipeline but every message is captured, never sent. A new one ends the previous test token.",
        )

    def handle(self, *args: Any, name: str, rotate: bool, test: bool, **options: Any) -> None:
        if test:
            try:
                client, token = services.api_client_test_token_issue(name=name)
            except ValidationFailed as exc:
                raise CommandError(exc.message) from exc
            self.stdout.write(f"Test token of API client {client.name!r} (test mode id {client.pk}), shown only now:")
            self.stdout.write(token)
            return
        existing = ApiClient.objects.filter(name=name.strip(), is_test=False).first() if rotate else None
        if existing is not None:
            token = services.api_client_rotate_token(client=existing)
            self.stdout.write(f"Rotated the token of API client {existing.name!r} (id {existing.pk}). Its token, shown only now:")
            self.stdout.write(token)
            return
        try:
            client, token = services.api_client_create(name=name)
        except ValidationFailed as exc:
            raise CommandError(exc.message) from exc
        self.stdout.write(f"Created API client {client.name!r} (id {client.pk}). Its token, shown only now:")
        self.stdout.write(token)
