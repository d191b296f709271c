"""Inbox user tokens die with the API client that made them: rotating its token (`create_api_client
--rotate`, the admin's action) or revoking it refuses every user token it made before, and closes
the streams open with them within 5 s in every web process (two gunicorn servers here), through
the inbox's Redis channel. Tokens made with the new client token work."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
import requests
from django.contrib.auth.models import User
from django.test import Client

from .factories import make_api_client
from .helpers import platform_env, wait_until
from .inbox_helpers import SseReader, bearer, user_token
from .live_servers import WebServer, gunicorn_server, manage

pytestmark = [pytest.mark.services, pytest.mark.django_db(transaction=True)]


@pytest.fixture(scope="module")
def servers(django_db_setup: Any, django_db_blocker: Any) -> Iterator[tuple[WebServer, WebServer]]:
    with (
        gunicorn_server(INBOX_STREAM_HEARTBEAT_SECONDS="1") as first,
        gunicorn_server(INBOX_STREAM_HEARTBEAT_SECONDS="1") as second,
    ):
        yield first, second


def feed_status(server: WebServer, token: str) -> int:
    return requests.get(server.url("/api/v1/inbox/items"), headers=bearer(token), timeout=10).status_code


def test_rotating_a_client_refuses_its_user_tokens_and_closes_their_streams_in_every_process(
    servers: tuple[WebServer, WebServer],
) -> None:
    shop, shop_token = make_api_client("shop")
    tokens = [user_token(server.base_url, shop_token, user) for server, user in zip(servers, ("ann", "bob"), strict=True)]
    streams = [SseReader(server.url("/api/v1/inbox/stream"), token=token) for server, token in zip(servers, tokens, strict=True)]
    for stream in streams:
        stream.next_of("counts")

    printed = manage(platform_env(), "create_api_client", "shop", "--rotate")  # a third process
    rotated_at = time.monotonic()

    wait_until(lambda: all(stream.ended.is_set() for stream in streams), timeout=10, message="both streams closed")
    assert time.monotonic() - rotated_at < 5.0
    for server in servers:
        for token in tokens:
            assert feed_status(server, token) == 401
    answer = requests.get(servers[1].url("/api/v1/inbox/stream"), params={"token": tokens[0]}, timeout=10)
    assert answer.status_code == 401 and "rotated" in answer.json()["error"]["message"]
    new_client_token = printed.split()[-1]
    assert feed_status(servers[0], user_token(servers[0].base_url, new_client_token, "ann")) == 200


@pytest.mark.parametrize("action", ["rotate_token_selected", "revoke_selected"])
def test_the_admins_rotate_and_revoke_actions_close_the_clients_streams(
    servers: tuple[WebServer, WebServer], action: str
) -> None:
    server = servers[0]
    shop, shop_token = make_api_client("shop")
    token = user_token(server.base_url, shop_token, "ann")
    admin = Client()
    admin.force_login(User.objects.create_superuser("root", password="root-pass-1"))

    with SseReader(server.url("/api/v1/inbox/stream"), token=token) as stream:
        stream.next_of("counts")
        answer = admin.post("/admin/notifications/apiclient/", {"action": action, "_selected_action": [shop.pk], "index": "0"})
        acted_at = time.monotonic()
        assert answer.status_code == 302
        wait_until(stream.ended.is_set, timeout=10, message="the stream closed")
        assert time.monotonic() - acted_at < 5.0

    assert feed_status(server, token) == 401
