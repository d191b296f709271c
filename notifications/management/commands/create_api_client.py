"""Create an API client and print its token alone on the last line."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from notifications import services
from notifications.errors import ValidationFailed


class Command(BaseCommand):
    help = "Create an API client; its bearer token is printed alone on the last line (shown once)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("name")

    def handle(self, *args: Any, name: str, **options: Any) -> None:
        try:
            client, token = services.api_client_create(name=name)
        except ValidationFailed as exc:
            raise CommandError(exc.message) from exc
        self.stdout.write(f"Created API client {client.name!r} (id {client.pk}). Its token, shown only now:")
        self.stdout.write(token)
