"""Operator commands: API client tokens, and clear refusals where a command needs RabbitMQ."""

from __future__ import annotations

import subprocess
import sys
from io import StringIO

import pytest
from django.core.management import CommandError, call_command
from rest_framework.test import APIClient

from .helpers import ROOT, platform_env

pytestmark = pytest.mark.django_db


def token_from(output: str) -> str:
    return output.strip().splitlines()[-1]


def answers(token: str) -> int:
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    return int(api.get("/api/v1/notifications").status_code)


def test_create_api_client_prints_a_working_token_refuses_a_second_and_rotates_on_request() -> None:
    first = StringIO()
    call_command("create_api_client", "events", stdout=first)
    old_token = token_from(first.getvalue())
    assert old_token.startswith("ntf_") and answers(old_token) == 200

    with pytest.raises(CommandError, match="already exists"):
        call_command("create_api_client", "events", stdout=StringIO())

    rotated = StringIO()
    call_command("create_api_client", "events", "--rotate", stdout=rotated)
    new_token = token_from(rotated.getvalue())
    assert "Rotated" in rotated.getvalue() and new_token != old_token
    assert answers(new_token) == 200 and answers(old_token) == 401


def test_redrive_of_an_unknown_dead_letter_fails() -> None:
    with pytest.raises(CommandError, match="no dead letter with id 999999"):
        call_command("redrive", "999999", stdout=StringIO())


def test_publish_event_on_the_embedded_broker_says_it_needs_rabbitmq() -> None:
    result = subprocess.run(
        [sys.executable, str(ROOT / "manage.py"), "publish_event", "order.created", "--raw", "{}"],
        cwd=ROOT,
        env=platform_env(BROKER_URL="memory://"),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 1
    assert "publish_event needs RabbitMQ" in result.stderr and "Traceback" not in result.stderr
