"""A known client's requests counted in blocks of its window (api/window_blocks.py), against the
real Redis: one round trip per block, never more than the rate across processes, and an address
that fails here is checked again at once."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from django.core.cache import cache
from django.test import RequestFactory
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
def one_window() -> Iterator[None]:
    """Windows are fixed minutes: start well inside one, so the requests are not split across two;
    tokens stay known throughout (a slow machine's requests take no other path), and the process
    starts holding nothing."""
    wait_until(lambda: time.time() % 60 < 50, timeout=15, message="well inside a minute")
    window_blocks.window_blocks.clear()
    window_blocks.address_checks.clear()
    with override_notifications(API_TOKEN_CACHE_SECONDS=60):
        yield
    window_blocks.window_blocks.clear()
    window_blocks.address_checks.clear()


def counted(client: ApiClient) -> int:
    """The client's count in the shared window (Redis), every process's blocks included."""
    key = ApiClientRateThrottle().window_key(client.pk, time.time())
    return int(redis_client().get(key) or 0)


def api_for(token: str, address: str = "192.0.2.10") -> APIClient:
    api = APIClient(REMOTE_ADDR=address)
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    return api


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
    assert blocks.block_to_fetch("w", 5) == 5
    # While that block is being fetched, the others count their own slot alone.
    assert [blocks.block_to_fetch("w", 5) for _ in range(3)] == [1, 1, 1]
    assert blocks.fetched("w", block=5, count=5, rate=100)  # slots 1-5: the fetcher's and four held
    assert [blocks.take("w") for _ in range(5)] == [True] * 4 + [False]
    assert blocks.block_to_fetch("w", 5) == 5  # fetched: the next request takes the next block
    assert not blocks.fetched("w", block=5, count=None, rate=100)  # the call failed: nothing held...
    assert blocks.block_to_fetch("w", 5) == 5  # ...and nothing left in flight


def test_a_block_is_exact_below_four_hundred_a_window(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ApiClientRateThrottle, "rate", "3/min", raising=False)
    _, token = make_api_client()
    api = api_for(token)
    assert [api.get(URL).status_code for _ in range(4)] == [200, 200, 200, 429]


def test_an_address_failing_in_this_process_is_refused_a_known_token_at_once() -> None:
    _, token = make_api_client()
    good = api_for(token, address="198.51.100.20")
    with override_notifications(API_AUTH_FAILURE_RATE="3/min"):
        assert [good.get(URL).status_code for _ in range(3)] == [200] * 3  # known, and the address checked
        guesser = api_for("ntf_guessed", address="198.51.100.20")
        assert [guesser.get(URL).status_code for _ in range(3)] == [401] * 3
        # Within the second the address's check would be trusted: its failures here dropped it.
        assert good.get(URL).status_code == 429


def test_a_failure_counted_by_another_process_is_seen_within_the_recheck(monkeypatch: pytest.MonkeyPatch) -> None:
    # Blocks far larger than the requests made: only the recheck, not a new block, can refuse.
    monkeypatch.setattr(auth, "block_for", lambda rate: 5000)
    _, token = make_api_client()
    good = api_for(token, address="198.51.100.21")
    with override_notifications(API_AUTH_FAILURE_RATE="3/min"):
        assert good.get(URL).status_code == 200
        assert good.get(URL).status_code == 200  # known: the address is checked now
        # Another process counts three failures of the address (its own Redis INCRs).
        throttle = auth.FailedAuthenticationThrottle()
        throttle.now = time.time()
        request = RequestFactory().get(URL, REMOTE_ADDR="198.51.100.21")
        redis_client().incrby(cache.make_key(throttle.get_cache_key(request, None)), 3)
        started = time.monotonic()
        wait_until(
            lambda: good.get(URL).status_code == 429,
            timeout=window_blocks.ADDRESS_RECHECK_SECONDS + 5,
            message="the address refused once its check is a second old",
        )
        # Not before the recheck was due (the check of the second request stood until then).
        assert time.monotonic() - started >= window_blocks.ADDRESS_RECHECK_SECONDS * 0.5
