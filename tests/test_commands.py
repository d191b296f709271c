"""Operator commands: API client tokens, and clear refusals where a command needs RabbitMQ."""

from __future__ import annotations

import subprocess
import sys
from io import StringIO

import pytest
from django.core.management import CommandError, call_command
from rest_framework.test import APIClient

from notifications.models import ApiClient, hash_token

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
    assert old_token.startswith("ntf_live_") and answers(old_token) == 200

    with pytest.raises(CommandError, match="already exists"):
        call_command("create_api_client", "events", stdout=StringIO())

    rotated = StringIO()
    call_command("create_api_client", "events", "--rotate", stdout=rotated)
    new_token = token_from(rotated.getvalue())
    assert "Rotated" in rotated.getvalue() and new_token != old_token
    assert answers(new_token) == 200 and answers(old_token) == 401


def test_create_api_client_test_issues_a_test_token_for_the_client_creating_it_when_missing() -> None:
    first = StringIO()
    call_command("create_api_client", "shop", "--test", stdout=first)
    test_token = token_from(first.getvalue())
    assert test_token.startswith("ntf_test_") and answers(test_token) == 200
    live = ApiClient.objects.get(name="shop", is_test=False)
    test = ApiClient.objects.get(name="shop", is_test=True)
    assert (test.live_client_id, test.token_prefix) == (live.pk, test_token[:12])

    # The client exists now (made by --test, with a live token nobody has): --rotate gives it one.
    with pytest.raises(CommandError, match="already exists"):
        call_command("create_api_client", "shop", stdout=StringIO())
    rotated = StringIO()
    call_command("create_api_client", "shop", "--rotate", stdout=rotated)
    live_token = token_from(rotated.getvalue())
    assert live_token.startswith("ntf_live_") and answers(live_token) == 200

    # Again: a new test token for the same test mode; the previous one ends.
    again = StringIO()
    call_command("create_api_client", "shop", "--test", stdout=again)
    assert answers(token_from(again.getvalue())) == 200 and answers(test_token) == 401
    assert ApiClient.objects.filter(name="shop").count() == 2


def test_a_token_made_before_modes_existed_keeps_working_as_a_live_token() -> None:
    client = ApiClient.objects.create(name="old", token_hash=hash_token("ntf_madeBeforeModes"), token_prefix="ntf_madeBefo")
    assert answers("ntf_madeBeforeModes") == 200
    assert not client.is_test and client.mode == "live"


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
