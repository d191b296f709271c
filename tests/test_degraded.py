"""With a dependency down the platform degrades instead of failing. Without Redis the API still
accepts (its throttles fail open) and the workers pause their sends rather than exceed a rate
limit, resuming by themselves when Redis is back; without PostgreSQL the API answers 503 in its
JSON shape with Retry-After and recovers by itself; and the embedded default (SQLite) queues
concurrent writes instead of failing them. Outages are made per test (a Redis of the test's own,
a port where nothing listens, this run's database refusing connections), never by stopping the
shared services."""

from __future__ import annotations

import logging
import socket
import subprocess
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import dramatiq
import pytest
import redis
import requests
from django.test import override_settings
from prometheus_client import REGISTRY
from rest_framework.test import APIClient

from notifications import degraded, ratelimit
from notifications.api.auth import ApiClientRateThrottle, FailedAuthenticationThrottle
from notifications.models import Notification, Status

from .factories import make_api_client
from .fakes import FakeProviderServer, override_notifications, provider_server_fixture  # noqa: F401
from .helpers import wait_until
from .live_servers import embedded_platform, free_port, gunicorn_server
from .test_events import database_refusing_connections

URL = "/api/v1/notifications"
BODY = {"user_id": "u1", "to": "ann@example.com", "message": "Your order shipped"}
OUTAGES = (ApiClientRateThrottle.outage, FailedAuthenticationThrottle.outage, ratelimit.redis_outage)


@pytest.fixture(autouse=True)
def _redis_trusted_again() -> Iterator[None]:
    yield
    for outage in OUTAGES:
        outage.reset()


def degraded_count(component: str) -> float:
    return REGISTRY.get_sample_value("notifications_degraded_total", {"component": component}) or 0.0


def cache_at(port: int, *, timeout: float = 2) -> dict[str, Any]:
    """CACHES as platform/settings.py builds them for REDIS_URL=redis://127.0.0.1:<port>/0."""
    return {
        "default": {
            "BACKEND": "django_prometheus.cache.backends.redis.RedisCache",
            "LOCATION": f"redis://127.0.0.1:{port}/0",
            "KEY_PREFIX": "degraded-test",
            "OPTIONS": {
                "CLIENT_CLASS": "django_redis.client.DefaultClient",
                "SOCKET_CONNECT_TIMEOUT": timeout,
                "SOCKET_TIMEOUT": timeout,
            },
        }
    }


class RedisServer:
    """A redis-server of the test's own, to kill and start again (the shared one is never touched)."""

    def __init__(self) -> None:
        self.port = free_port()
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        command = ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"]
        self.process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_until(self.answers, timeout=10, message="redis-server up")

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=10)

    def answers(self) -> bool:
        try:
            return bool(redis.Redis(port=self.port, socket_timeout=1).ping())
        except redis.RedisError:
            return False


@pytest.fixture
def own_redis() -> Iterator[RedisServer]:
    server = RedisServer()
    server.start()
    yield server
    server.kill()


def most_in_any_second(times: list[float]) -> int:
    times = sorted(times)
    return max(sum(1 for t in times[i:] if t < start + 1.0) for i, start in enumerate(times))


# --- Redis down ---------------------------------------------------------------------------------


@pytest.mark.services
def test_with_redis_refusing_connections_the_api_accepts_and_counts_its_throttles_as_degraded(
    api: APIClient, caplog: pytest.LogCaptureFixture, remembering_tokens: None
) -> None:
    before = {component: degraded_count(component) for component in ("throttle", "auth_throttle")}
    # Nothing listens on port 1: connection refused, as from a Redis that is down.
    with override_settings(CACHES=cache_at(1)), caplog.at_level(logging.INFO, logger="notifications.degraded"):
        responses = [api.post(URL, {**BODY, "user_id": f"u{n}"}, format="json") for n in range(4)]
    assert [r.status_code for r in responses] == [202] * 4, [r.content for r in responses]
    assert Notification.objects.count() == 4
    # The token's failure slot is taken on its first request only: once known (token_cache.py) a
    # good token's address's failures are not looked at (a good token is served whatever they are).
    assert {component: degraded_count(component) - before[component] for component in before} == {
        "throttle": 4,
        "auth_throttle": 1,
    }
    # One warning per component for the outage, not one per request.
    warnings = [r.getMessage() for r in caplog.records if r.name == "notifications.degraded" and r.levelno == logging.WARNING]
    assert len(warnings) == 2, warnings
    assert any("API requests are not throttled" in w for w in warnings)


def test_a_hanging_redis_costs_the_api_one_timeout_per_few_seconds_not_one_per_request(api: APIClient) -> None:
    # A Redis that accepts connections and never answers (a hung process, a full network buffer):
    # every call waits for the socket timeout.
    with socket.socket() as hung:
        hung.bind(("127.0.0.1", 0))
        hung.listen(64)
        with override_settings(CACHES=cache_at(hung.getsockname()[1], timeout=1)):
            started = time.monotonic()
            statuses = [api.post(URL, {**BODY, "user_id": f"u{n}"}, format="json").status_code for n in range(5)]
            elapsed = time.monotonic() - started
    assert statuses == [202] * 5
    # The first request waits once per throttle (2 x 1 s); without the pause after a failure all
    # five would have waited 10 s.
    assert elapsed < 4, elapsed


def test_without_redis_the_rate_limiter_reserves_nothing_and_says_when_to_come_back(
    caplog: pytest.LogCaptureFixture,
) -> None:
    before = degraded_count("rate_limiter")
    with override_settings(CACHES=cache_at(1)), caplog.at_level(logging.WARNING, logger="notifications.degraded"):
        first = ratelimit.reserve_send_slot("email")
        second = ratelimit.reserve_send_slot("email")
    assert not first.reserved and not second.reserved
    assert 1 <= second.wait_seconds <= degraded.RETRY_SECONDS
    assert degraded_count("rate_limiter") - before == 2
    assert [r.getMessage() for r in caplog.records if "sends are paused" in r.getMessage()], caplog.records


def test_with_redis_killed_sends_pause_and_resume_within_the_limit_once_it_is_back(
    own_redis: RedisServer,
    provider_server: FakeProviderServer,
    worker: dramatiq.Worker,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    monkeypatch.setattr(degraded, "RETRY_SECONDS", 0.5)  # Redis is tried again sooner than in production
    _, token = make_api_client("acme")
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    paused_before = degraded_count("rate_limiter")
    with (
        override_settings(CACHES=cache_at(own_redis.port)),
        override_notifications(RATE_LIMITS="sms=5/s"),
        caplog.at_level(logging.INFO, logger="notifications.degraded"),
    ):
        own_redis.kill()
        accepted = [
            api.post(URL, {"user_id": f"u{n}", "channel": "sms", "to": "+14155550123", "message": "hi"}, format="json")
            for n in range(12)
        ]
        assert [r.status_code for r in accepted] == [202] * 12
        ids = [r.json()["id"] for r in accepted]
        # Every notification came to a worker and was put back, none was sent.
        wait_until(lambda: degraded_count("rate_limiter") - paused_before >= 24, timeout=30, message="sends paused")
        assert provider_server.requests == []
        assert Notification.objects.filter(pk__in=ids, status__in=[Status.ACCEPTED, Status.QUEUED]).count() == 12

        own_redis.start()
        back_at = time.monotonic()
        wait_until(
            lambda: Notification.objects.filter(pk__in=ids, status=Status.DELIVERED).count() == 12,
            timeout=30,
            message="all delivered once Redis is back",
        )
    sent = [request.received_at for request in provider_server.requests]
    assert len(sent) == 12  # each once
    # 5/s: slots 200 ms apart, so a 1 s window holds at most 5 (6 with one on each edge).
    assert most_in_any_second(sent) <= 6, sorted(round(t - min(sent), 3) for t in sent)
    assert max(sent) - min(sent) >= 11 / 5 * 0.9  # they really were spread, not sent in a burst
    messages = [r.getMessage() for r in caplog.records]
    assert any("sends are paused until it answers again" in m for m in messages), messages
    assert any("sends are paused no more" in m for m in messages), messages
    print(
        f"Redis killed: 12 accepted, 0 sent while down; first send {min(sent) - back_at:.1f} s after it was back, "
        f"all in {max(sent) - back_at:.1f} s, at most {most_in_any_second(sent)} in any 1 s (limit 5/s)"
    )


# --- PostgreSQL down -----------------------------------------------------------------------------


def test_with_the_database_refusing_connections_the_api_answers_503_json_then_recovers_by_itself(
    transactional_db: None,
) -> None:
    _, token = make_api_client("acme")
    auth = {"Authorization": f"Bearer {token}"}
    with gunicorn_server() as server:

        def accept(n: int) -> requests.Response:
            return requests.post(server.url(URL), json={**BODY, "user_id": f"u{n}"}, headers=auth, timeout=30)

        assert accept(0).status_code == 202
        with database_refusing_connections():
            refused = accept(1)
            listed = requests.get(server.url(URL), headers=auth, timeout=30)
            ready = requests.get(server.url("/readyz"), timeout=30)
        for response in (refused, listed):
            assert response.status_code == 503, response.content[:500]
            assert response.headers["Content-Type"] == "application/json"
            error = response.json()["error"]
            assert error["code"] == "unavailable" and error["request_id"] == response.headers["X-Request-ID"]
            assert response.headers["Retry-After"] == "5"
        assert ready.status_code == 503 and ready.json()["down"] == ["database"]
        # Back without a restart: the next requests reconnect.
        wait_until(lambda: accept(2).status_code == 202, timeout=20, message="accepting again")
        assert requests.get(server.url("/readyz"), timeout=30).status_code == 200
        output = server.output()
    assert "Traceback" not in output, output
    assert Notification.objects.filter(user_id__in=["u0", "u2"]).count() == 2
    assert not Notification.objects.filter(user_id="u1").exists()


# --- The embedded default under concurrency ------------------------------------------------------


def test_the_embedded_default_queues_200_concurrent_writes_instead_of_failing_them(tmp_path: Path) -> None:
    with embedded_platform(tmp_path) as (server, token):
        auth = {"Authorization": f"Bearer {token}"}
        clients = 200
        barrier = threading.Barrier(clients)
        answers: Counter[Any] = Counter()
        accepted: list[str] = []
        lock = threading.Lock()

        def write(n: int) -> None:
            barrier.wait()
            try:
                if n % 4:  # three in four update a recipient (20 of them, so rows are contended)
                    response = requests.put(
                        server.url(f"/api/v1/recipients/u{n % 20}"), json={"email": f"a{n}@example.com"}, headers=auth, timeout=60
                    )
                else:  # and one in four accepts an email, which the in-process worker then writes too
                    response = requests.post(server.url(URL), json={**BODY, "user_id": f"u{n}"}, headers=auth, timeout=60)
                answer: Any = response.status_code
            except requests.RequestException as exc:
                answer = type(exc).__name__
            with lock:
                answers[answer] += 1
                if answer == 202:
                    accepted.append(response.json()["id"])

        started = time.monotonic()
        threads = [threading.Thread(target=write, args=(n,)) for n in range(clients)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        elapsed = time.monotonic() - started

        assert set(answers) <= {200, 201, 202} and sum(answers.values()) == clients, answers
        assert answers[202] == 50 and answers[200] + answers[201] == 150

        def delivered() -> int:
            listed = requests.get(server.url(f"{URL}?status=delivered&page_size=200"), headers=auth, timeout=30)
            return len(listed.json()["results"])

        wait_until(lambda: delivered() == 50, timeout=60, message="the worker threads delivered every email")
        output = server.output()
    assert "database is locked" not in output and "Traceback" not in output, output
    print(f"200 concurrent writes on the embedded default: {dict(answers)} in {elapsed:.1f}s")
