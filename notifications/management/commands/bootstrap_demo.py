"""Create (or refresh) the demo admin user and demo API client that `make run` prints."""

from __future__ import annotations

from typing import Any

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandParser

from notifications import services
from notifications.models import ApiClient


class Command(BaseCommand):
    help = "Create the demo superuser and a demo API client; prints their credentials."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--username", default="admin")
        parser.add_argument("--password", default="admin")
        parser.add_argument("--client", default="demo")
        parser.add_argument("--address", default="127.0.0.1:8000", help="Where `make run` serves (its ADDRESS).")

    def handle(self, *args: Any, username: str, password: str, client: str, address: str, **options: Any) -> None:
        user_model = get_user_model()
        user, created = user_model.objects.get_or_create(username=username, defaults={"is_staff": True, "is_superuser": True})
        if created:
            user.set_password(password)
            user.save()
        api_client = ApiClient.objects.filter(name=client).first()
        if api_client is None:
            api_client, token = services.api_client_create(name=client)
        else:
            # Only the hash is stored, so a fresh token is the only way to print a working one.
            token = services.api_client_rotate_token(client=api_client)
        self.stdout.write(
            f"API docs:   http://{address}/api/docs/\n"
            f"Admin:      http://{address}/admin/  user {username!r}"
            + (f" password {password!r}" if created else " (existing password)")
        )
        self.stdout.write(f"API client: {api_client.name!r}")
        self.stdout.write(f"API token:  {token}")
