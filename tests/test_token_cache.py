"""The token cache is never stale: a client changed in one process (a token rotated, a client
revoked, a status webhook URL set) is seen by every other process's cache at once, through the
change message (token_cache.ClientChanges), never after API_TOKEN_CACHE_SECONDS. Two processes:
gunicorn as deployed, with a cache of 60 s, and this one (or a manage.py command) making changes."""

from __future__ import annotations

import subprocess
import sys

import pytest
import requests

from notifications import services
from notifications.models import ApiClient, Notification, Status, StatusEvent, Suppression
from notifications.token_cache import KnownTokens, client_changes

from .factories import make_api_client
from .fakes import override_notifications
from .helpers import ROOT, platform_env, wait_until
from .live_servers import gunicorn_server

pytestmark = pytest.mark.django_db(transaction=True)

# Far longer than any wait below: a change seen within it came by the change message, not by expiry.
CACHE_SECONDS = "60"
SEEN_WITHIN = 5.0


def get_client(base_url: str, token: str) -> int:
    return requests.get(f"{base_url}/api/v1/client", headers={"Authorization": f"Bearer {token}"}, timeout=10).status_code


def test_a_token_rotated_by_the_command_in_another_process_stops_working_in_the_web_process_at_once() -> None:
    _, token = make_api_client("rotated")
    with gunicorn_server(API_TOKEN_CACHE_SECONDS=CACHE_SECONDS) as web:
        assert get_client(web.base_url, token) == 200  # remembered by the web process now
        rotated = subprocess.run(
            [sys.executable, str(ROOT / "manage.py"), "create_api_client", "rotated", "--rotate"],
            cwd=ROOT,
            env=platform_env(),
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert rotated.returncode == 0, rotated.stderr
        new_token = rotated.stdout.split()[-1]
        wait_until(lambda: get_client(web.base_url, token) == 401, timeout=SEEN_WITHIN, message="the old token refused")
        assert get_client(web.base_url, new_token) == 200


def test_a_client_revoked_in_another_process_is_refused_by_the_web_process_at_once() -> None:
    client, token = make_api_client("revoked")
    with gunicorn_server(API_TOKEN_CACHE_SECONDS=CACHE_SECONDS) as web:
        assert get_client(web.base_url, token) == 200
        services.api_client_revoke(client=client)
        wait_until(lambda: get_client(web.base_url, token) == 401, timeout=SEEN_WITHIN, message="the revoked client refused")


def test_a_status_webhook_url_set_in_another_process_is_used_for_the_next_suppression_event() -> None:
    client, token = make_api_client("late-webhook")
    Suppression.objects.create(client=client, channel="email", address="ann@example.com", reason="bounced")
    with gunicorn_server(API_TOKEN_CACHE_SECONDS=CACHE_SECONDS) as web:
        assert get_client(web.base_url, token) == 200  # the client as it was (no URL), remembered
        with override_notifications(WEBHOOK_ALLOW_HOSTS=["127.0.0.1"]):
            services.api_client_set_status_webhook_url(client=ApiClient.objects.get(pk=client.pk), url="http://127.0.0.1:9/hooks")
        # At once, not after the change message: the very next accept records the event.
        answer = requests.post(
            f"{web.base_url}/api/v1/notifications",
            json={"user_id": "u1", "to": "ann@example.com", "message": "hi"},
            headers={"Authorization": f"Bearer {token}"},
            timeout=10,
        )
    assert answer.status_code == 202 and answer.json()["status"] == Status.SUPPRESSED
    notification = Notification.objects.get(pk=answer.json()["id"])
    assert StatusEvent.objects.filter(notification=notification, type="notification.suppressed").count() == 1


class Remembered:
    """Stands for an ApiClient (the cache marks what it hands out)."""


def test_a_client_read_before_a_change_is_not_remembered_after_it() -> None:
    # This process listens for changes (Redis), or it would remember nothing at all.
    wait_until(client_changes.trusted, timeout=SEEN_WITHIN, message="subscribed to client changes")
    known = KnownTokens()
    generation = known.generation
    known.forget_all()  # a change lands while the request was reading its client
    known.remember("hash", Remembered(), generation=generation)
    assert known.get("hash", max_age=60) is None
    known.remember("hash", marker := Remembered(), generation=known.generation)
    assert known.get("hash", max_age=60) is marker
