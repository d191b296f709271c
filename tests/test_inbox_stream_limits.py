"""What one user, client or reader can take of the live stream's server, through the web server as
deployed (gunicorn with uvicorn workers) on the real PostgreSQL and Redis: streams capped per user
(429 with Retry-After, the slot free again once a stream ends), a reader that stops reading closed
once its token is revoked or when it has taken no event within the send timeout, tokens in no URL
but the stream's, one-use tickets, and a resume from
past the event window answered with a reset."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests

from notifications.connections import redis_client
from notifications.inbox.slots import user_slots_key
from notifications.inbox.store import inbox_events_purge
from notifications.models import InboxEvent

from .factories import make_api_client
from .helpers import wait_until
from .inbox_helpers import SseReader, bearer, deliver_item, stream_ticket, user_token
from .live_servers import WebServer, gunicorn_server

pytestmark = [pytest.mark.services, pytest.mark.django_db(transaction=True)]

TCP_ESTABLISHED = 1
# Items of 100 KB for a stalled reader: 8 MB, past any send buffer the kernel gives one socket here.
STALL_ITEMS = 80


@pytest.fixture(scope="module")
def server(django_db_setup: Any, django_db_blocker: Any) -> Iterator[WebServer]:
    # A long send timeout: a stalled reader here is closed by its revocation, not by the timeout.
    with gunicorn_server(INBOX_STREAM_HEARTBEAT_SECONDS="1", INBOX_STREAM_SEND_TIMEOUT_SECONDS="300") as web:
        yield web


def held_slots(client_id: int, user_id: str) -> int:
    return int(redis_client().zcard(user_slots_key(client_id, user_id)))


def server_end(server_port: int, client_port: int) -> tuple[int, int] | None:
    """The server's end of a local TCP connection as the kernel has it: (state, bytes queued to
    send); None once it is gone."""
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        local, remote = fields[1], fields[2]
        if int(local.split(":")[1], 16) == server_port and int(remote.split(":")[1], 16) == client_port:
            return int(fields[3], 16), int(fields[4].split(":")[0], 16)
    return None


class StalledReader:
    """A client that opens the stream, reads the answer's head, then never reads again (with a
    small receive buffer, so the server's buffers fill soon)."""

    def __init__(self, server: WebServer, token: str) -> None:
        host, port = server.base_url.removeprefix("http://").split(":")
        self.server_port = int(port)
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        self.sock.settimeout(10)
        self.sock.connect((host, self.server_port))
        self.client_port = self.sock.getsockname()[1]
        request = f"GET /api/v1/inbox/stream?token={token} HTTP/1.1\r\nHost: {host}\r\nAccept: text/event-stream\r\n\r\n"
        self.sock.sendall(request.encode())
        head = b""
        while b"\r\n\r\n" not in head:
            head += self.sock.recv(1)
        assert head.startswith(b"HTTP/1.1 200"), head

    def server_end(self) -> tuple[int, int] | None:
        return server_end(self.server_port, self.client_port)

    def close(self) -> None:
        self.sock.close()


def test_a_users_sixth_stream_is_refused_with_429_and_retry_after_until_one_of_five_ends(server: WebServer) -> None:
    shop, shop_token = make_api_client("shop")
    token = user_token(server.base_url, shop_token, "ann")
    url = server.url("/api/v1/inbox/stream")
    streams = [SseReader(url, token=token) for _ in range(5)]
    try:
        for stream in streams:
            stream.next_of("counts")

        sixth = requests.get(url, params={"token": token}, timeout=10)

        assert sixth.status_code == 429, sixth.text
        assert sixth.json()["error"]["code"] == "too_many_streams"
        assert int(sixth.headers["Retry-After"]) > 0
        assert held_slots(shop.pk, "ann") == 5
        bobs = SseReader(url, token=user_token(server.base_url, shop_token, "bob"))  # another user's are their own
        bobs.close()
        streams.pop().close()
        wait_until(lambda: held_slots(shop.pk, "ann") == 4, timeout=5, message="the closed stream's slot is given back")
        streams.append(SseReader(url, token=token))
        assert streams[-1].next_of("counts").type == "counts"
    finally:
        for stream in streams:
            stream.close()
    wait_until(lambda: held_slots(shop.pk, "ann") == 0, timeout=5, message="every slot given back")


def test_a_stalled_reader_whose_token_is_revoked_is_closed_within_5_seconds(server: WebServer) -> None:
    shop, shop_token = make_api_client("shop")
    reader = StalledReader(server, user_token(server.base_url, shop_token, "ann"))
    try:
        assert held_slots(shop.pk, "ann") == 1
        # More events than the kernel's buffers hold (its send buffer grows to tcp_wmem's maximum,
        # 4 MB here), for a reader that takes none: the server's send blocks on the transport.
        for index in range(STALL_ITEMS):
            deliver_item(shop, "ann", f"big {index}", body="x" * 100_000)
        queued: list[int] = []

        def blocked() -> bool:
            end = reader.server_end()
            queued.append(end[1] if end else 0)
            return len(queued) >= 5 and queued[-1] > 0 and len(set(queued[-5:])) == 1  # full, and stays so

        wait_until(blocked, timeout=20, interval=0.1, message="the server's end holds unsent bytes it cannot send")
        revoked_at = time.monotonic()
        answer = requests.delete(
            server.url("/api/v1/inbox/tokens"), params={"user_id": "ann"}, headers=bearer(shop_token), timeout=10
        )
        assert answer.status_code == 204

        def dropped() -> bool:
            end = reader.server_end()
            return (end is None or end[0] != TCP_ESTABLISHED) and held_slots(shop.pk, "ann") == 0

        wait_until(dropped, timeout=10, interval=0.05, message="the server drops the connection and its slot")
        assert time.monotonic() - revoked_at < 5.0
        # The stream was blocked sending, not waiting for a wake-up (its guard says which it closed).
        assert '"reason": "revoked", "blocked": true' in server.output()
    finally:
        reader.close()


def test_a_reader_that_takes_no_event_within_the_send_timeout_is_dropped(django_db_setup: Any) -> None:
    with gunicorn_server(INBOX_STREAM_SEND_TIMEOUT_SECONDS="2") as quick:
        shop, shop_token = make_api_client("shop")
        reader = StalledReader(quick, user_token(quick.base_url, shop_token, "ann"))
        try:
            for index in range(STALL_ITEMS):
                deliver_item(shop, "ann", f"big {index}", body="x" * 100_000)
            filled_at = time.monotonic()

            def dropped() -> bool:
                end = reader.server_end()
                return (end is None or end[0] != TCP_ESTABLISHED) and held_slots(shop.pk, "ann") == 0

            wait_until(dropped, timeout=15, interval=0.1, message="the server drops the stalled reader")
            assert time.monotonic() - filled_at < 2.0 + 5.0
            assert '"reason": "stalled", "blocked": true' in quick.output()
        finally:
            reader.close()


def test_a_token_in_the_query_is_refused_on_every_inbox_url_but_the_streams(server: WebServer) -> None:
    shop, shop_token = make_api_client("shop")
    item = deliver_item(shop, "ann")
    token = user_token(server.base_url, shop_token, "ann")

    feed = requests.get(server.url("/api/v1/inbox/items"), params={"token": token}, timeout=10)
    counts = requests.get(server.url("/api/v1/inbox/counts"), params={"token": token}, timeout=10)
    mark = requests.post(server.url(f"/api/v1/inbox/items/{item.pk}/read"), params={"token": token}, timeout=10)

    assert [feed.status_code, counts.status_code, mark.status_code] == [401, 401, 401]
    assert feed.json()["error"]["code"] == "not_authenticated"
    with SseReader(server.url("/api/v1/inbox/stream"), token=token) as stream:
        assert stream.next_of("counts").data["total"] == 1


def test_a_stream_ticket_opens_one_stream_once(server: WebServer) -> None:
    shop, shop_token = make_api_client("shop")
    token = user_token(server.base_url, shop_token, "ann")
    made = requests.post(server.url("/api/v1/inbox/stream/tickets"), headers=bearer(token), timeout=10)
    assert made.status_code == 201, made.text
    assert made.headers["Cache-Control"] == "no-store" and made.json()["expires_at"].endswith("Z")
    ticket = made.json()["ticket"]
    url = server.url("/api/v1/inbox/stream")

    with SseReader(url, ticket=ticket) as stream:
        assert stream.next_of("counts").type == "counts"
        again = requests.get(url, params={"ticket": ticket}, timeout=10)

    assert again.status_code == 401 and "used already" in again.json()["error"]["message"]
    by_client_token = requests.post(server.url("/api/v1/inbox/stream/tickets"), headers=bearer(shop_token), timeout=10)
    assert by_client_token.status_code == 401
    revoked = stream_ticket(server.base_url, token)
    requests.delete(server.url("/api/v1/inbox/tokens"), params={"user_id": "ann"}, headers=bearer(shop_token), timeout=10)
    assert requests.get(url, params={"ticket": revoked}, timeout=10).status_code == 401  # it dies with its token


def test_a_resume_from_an_event_no_longer_kept_is_answered_with_reset(server: WebServer) -> None:
    shop, shop_token = make_api_client("shop")
    token = user_token(server.base_url, shop_token, "ann")
    url = server.url("/api/v1/inbox/stream")
    with SseReader(url, token=token) as stream:
        stream.next_of("counts")
        deliver_item(shop, "ann", "seen before the drop")
        left_at = stream.next_of("counts").id
    deliver_item(shop, "ann", "missed")
    newest = InboxEvent.objects.filter(user_id="ann").latest("id").created_at
    inbox_events_purge(before=newest)  # the window has passed over what the page last saw
    assert not InboxEvent.objects.filter(pk=left_at).exists()

    with SseReader(url, token=token, last_event_id=left_at) as resumed:
        reset = resumed.next()
        deliver_item(shop, "ann", "after the reset")
        after = resumed.next_of("item.created")

    assert reset.type == "reset" and reset.data == {"unseen": 2, "unread": 2, "total": 2}
    assert reset.id > left_at and after.id > reset.id and after.data["title"] == "after the reset"
