"""A known client's requests counted in blocks of its window (api/window_blocks.py), against the
real Redis: one round trip per block, never more than the rate across processes, blocks held by
the process (any thread takes them, on a threaded server as under gunicorn) so what it holds back
stays under a block, and a good token served whatever its address's failures."""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import requests
from django.db import connections
from django_redis.pool import ConnectionFactory
from rest_framework.test import APIClient

from notifications.api import auth, window_blocks
from notifications.api.auth import ApiClientRateThrottle
from notifications.conf import redis_client
from notifications.models import ApiClient

from .factories import make_api_client
from .fakes import override_notifications
from .helpers import wait_until

URL = "/api/v1/notifications"
pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def one_window(remembering_tokens: None) -> Iterator[None]:
    """Windows are fixed minutes: start well inside one, so the requests are not split across two;
    tokens stay known throughout (a slow machine's requests take no other path), and the process
    starts holding nothing."""
    wait_until(lambda: time.time() % 60 < 50, timeout=15, message="well inside a minute")
    window_blocks.window_blocks.clear()
    with override_notifications(API_TOKEN_CACHE_SECONDS=60):
        yield
    window_blocks.window_blocks.clear()


def counted(client: ApiClient) -> int:
    """The client's count in the shared window (Redis), every process's blocks included."""
    key = ApiClientRateThrottle().window_key(client.pk, time.time())
    return int(redis_client().get(key) or 0)


def api_for(token: str, address: str = "192.0.2.10") -> APIClient:
    api = APIClient(REMOTE_ADDR=address)
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    return api


@pytest.mark.services
def test_a_known_clients_requests_take_one_redis_count_per_block(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ApiClientRateThrottle, "rate", "1000/min", raising=False)
    assert window_blocks.block_for(1000) == 5
    client, token = make_api_client()
    api = api_for(token)
    assert api.get(URL).status_code == 200
    assert counted(client) == 1  # the token's first request, read from PostgreSQL: counted alone
    assert [api.get(URL).status_code for _ in range(5)] == [200] * 5
    assert counted(client) == 6  # the next five: one block of five, one round trip
    assert api.get(URL).status_code == 200
    assert counted(client) == 11  # the seventh opens the next block


def test_processes_holding_blocks_together_never_let_more_than_the_rate_through(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ApiClientRateThrottle, "rate", "10/min", raising=False)
    monkeypatch.setattr(auth, "block_for", lambda rate: 4)
    client, token = make_api_client()
    api = api_for(token)
    assert api.get(URL).status_code == 200  # the first (PostgreSQL path): count 1
    # Two web processes, each with its own blocks, taking turns on the same Redis.
    processes = [window_blocks.WindowBlocks(), window_blocks.WindowBlocks()]
    answers = []
    for turn in range(16):
        monkeypatch.setattr(auth, "window_blocks", processes[turn % 2])
        answers.append(api.get(URL).status_code)
    # Each took a block of 4 (counts 2-5 and 6-9) and handed it out; the next block had one slot
    # left under the rate (10). The shared count then refuses everyone, whoever holds what.
    assert answers == [200] * 9 + [429] * 7
    assert 1 + answers.count(200) == 10


def test_threads_that_find_no_slot_held_fetch_one_block_between_them() -> None:
    blocks = window_blocks.WindowBlocks()
    assert blocks.claim("w", 5) == 5
    # While that block is being fetched, the others count their own slot alone.
    assert [blocks.claim("w", 5) for _ in range(3)] == [1, 1, 1]
    assert blocks.fetched("w", block=5, count=5, rate=100)  # slots 1-5: the fetcher's and four held
    assert [blocks.claim("w", 5) for _ in range(5)] == [0] * 4 + [5]  # four held, then the next block
    assert not blocks.fetched("w", block=5, count=None, rate=100)  # the call failed: nothing held...
    assert blocks.claim("w", 5) == 5  # ...and nothing left in flight


def test_a_block_is_exact_below_four_hundred_a_window(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ApiClientRateThrottle, "rate", "3/min", raising=False)
    _, token = make_api_client()
    api = api_for(token)
    assert [api.get(URL).status_code for _ in range(4)] == [200, 200, 200, 429]


def test_a_known_token_is_served_from_an_address_past_its_failure_limit() -> None:
    _, token = make_api_client()
    good = api_for(token, address="198.51.100.20")
    with override_notifications(API_AUTH_FAILURE_RATE="3/min"):
        assert [good.get(URL).status_code for _ in range(3)] == [200] * 3  # known now
        guesser = api_for("ntf_guessed", address="198.51.100.20")
        assert [guesser.get(URL).status_code for _ in range(4)] == [401] * 3 + [429]
        assert [good.get(URL).status_code for _ in range(3)] == [200] * 3
        assert guesser.get(URL).status_code == 429


class CountedBlocks(window_blocks.WindowBlocks):
    """The process's blocks, counting what it takes from the shared count."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[int] = []  # the slots each Redis call took

    def fetched(self, window: Any, *, block: int, count: int | None, rate: int) -> bool:
        self.calls.append(block)
        return super().fetched(window, block=block, count=count, rate=rate)


def in_threads(threads: int, requests_each: int, request: Callable[[], int]) -> list[int]:
    """``request()`` ``requests_each`` times in each of ``threads`` threads started together."""
    barrier, answers, lock = threading.Barrier(threads), [], threading.Lock()

    def run() -> None:
        barrier.wait()
        try:
            mine = [request() for _ in range(requests_each)]
        finally:
            connections.close_all()  # the thread's own PostgreSQL connection, if it made one
        with lock:
            answers.extend(mine)

    workers = [threading.Thread(target=run) for _ in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(timeout=120)
    assert len(answers) == threads * requests_each
    return answers


def test_a_threaded_server_serves_every_request_under_the_rate_taking_one_block_at_a_time(
    live_server: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Django's threaded server (as runserver: a thread per request, so a Redis client per request)
    # with the default 6000/min: 400 requests from 8 threads are all served.
    monkeypatch.setattr(ApiClientRateThrottle, "rate", "6000/min", raising=False)
    blocks = CountedBlocks()
    monkeypatch.setattr(auth, "window_blocks", blocks)
    client, token = make_api_client()
    block = window_blocks.block_for(6000)
    assert block == 30

    def request() -> int:
        headers = {"Authorization": f"Bearer {token}"}
        return requests.get(f"{live_server.url}{URL}", headers=headers, timeout=30).status_code

    answers = in_threads(8, 50, request)
    assert answers == [200] * 400
    # Every request counted in the shared window, and no more than a block less one held back.
    assert 400 <= counted(client) <= 400 + block - 1
    # Whole blocks only once the last was used up: at most one per block of requests.
    assert blocks.calls.count(block) <= math.ceil(400 / block)


@pytest.mark.parametrize("rate", ["1000/min", "6000/min", "100000/min"])
@pytest.mark.parametrize("pools", ["one pool", "a pool per thread"])
def test_what_a_process_holds_back_stays_under_a_block_whatever_its_threads(
    transactional_db: None, monkeypatch: pytest.MonkeyPatch, rate: str, pools: str
) -> None:
    # The bound docs/operations.md gives: at most block - 1 slots per process and client are counted in the
    # shared window and not yet handed out, with 8 threads (8 Redis clients) taking them; also
    # when each thread's client has a pool of its own, as django-redis makes for threads that
    # start together (gunicorn's: its pool cache is filled without a lock).
    monkeypatch.setattr(ApiClientRateThrottle, "rate", rate, raising=False)
    if pools == "a pool per thread":
        monkeypatch.setattr(ConnectionFactory, "get_or_create_connection_pool", ConnectionFactory.get_connection_pool)
    block = window_blocks.block_for(int(rate.split("/")[0]))
    client, token = make_api_client()
    local = threading.local()

    def request() -> int:
        if not hasattr(local, "api"):
            local.api = api_for(token)
        return int(local.api.get(URL).status_code)

    served = 0
    for _ in range(3):
        answers = in_threads(8, 7, request)
        assert answers == [200] * 56
        served += len(answers)
        assert served <= counted(client) <= served + block - 1, (served, counted(client), block)
