"""Unexpected and hostile input answers in the API's one JSON error shape, never an HTML page:
errors nobody modelled (a 500 with its request id), unknown paths, guessed tokens (throttled per
client address), paths beyond Latin-1, and bodies that jsonb or the JSON parser cannot take;
through the test client and through real servers (gunicorn as deployed, and the embedded
`runplatform` on Django's own server), since the test client skips the server's WSGI environ."""

from __future__ import annotations

import json
import logging
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
import requests
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.db import OperationalError
from django.http import HttpRequest, HttpResponse
from django.test import Client, override_settings
from prometheus_client import REGISTRY
from rest_framework.test import APIClient

from notifications import selectors
from notifications.api.auth import ApiClientRateThrottle, FailedAuthenticationThrottle
from notifications.conf import get_config
from notifications.logging import JsonFormatter
from notifications.models import ApiClient, Notification

from .factories import make_api_client
from .fakes import override_notifications
from .helpers import wait_until
from .live_servers import WebServer, embedded_platform, gunicorn_server

URL = "/api/v1/notifications"
BODY = {"user_id": "u1", "to": "ann@example.com", "message": "Your order shipped"}


@pytest.fixture(autouse=True)
def _redis_trusted_again() -> Iterator[None]:
    yield
    for throttle in (ApiClientRateThrottle, FailedAuthenticationThrottle):
        throttle.outage.reset()


def error_of(response: Any) -> dict[str, Any]:
    """The error of a JSON error answer (test client or requests), failing on anything else."""
    content_type = response.headers["Content-Type"]
    assert content_type.startswith("application/json"), (response.status_code, content_type, response.content[:300])
    error: dict[str, Any] = json.loads(response.content)["error"]
    return error


class JsonLogLines(logging.Handler):
    """Log lines as the console handler writes them (JSON, formatted while the request runs)."""

    def __init__(self) -> None:
        super().__init__(level=logging.INFO)
        self.setFormatter(JsonFormatter())
        self.lines: list[dict[str, Any]] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(json.loads(self.format(record)))


@pytest.fixture
def json_log() -> Iterator[JsonLogLines]:
    handler = JsonLogLines()
    # django.* does not propagate to the root (platform/settings.py LOGGING); ours does.
    loggers = [logging.getLogger(), logging.getLogger("django")]
    for logger in loggers:
        logger.addHandler(handler)
    yield handler
    for logger in loggers:
        logger.removeHandler(handler)


# --- An error nobody modelled is a JSON 500 with a request id ----------------------------------


@pytest.mark.parametrize("debug", [False, True])
def test_an_unexpected_error_in_a_view_is_a_json_500_whose_request_id_is_in_the_header_and_the_log_line(
    api: APIClient, monkeypatch: pytest.MonkeyPatch, json_log: JsonLogLines, debug: bool
) -> None:
    def broken(**kwargs: Any) -> Any:
        raise RuntimeError("the selector broke")

    monkeypatch.setattr(selectors, "notification_get", broken)
    with override_settings(DEBUG=debug):
        response = api.get(f"{URL}/00000000-0000-0000-0000-000000000000", HTTP_X_REQUEST_ID="req-4242")
    assert response.status_code == 500
    error = error_of(response)
    assert error["code"] == "internal_error" and error["request_id"] == "req-4242"
    assert "the selector broke" not in response.content.decode()  # the log has it, the client does not
    assert response["X-Request-ID"] == "req-4242"
    logged = [line for line in json_log.lines if "the selector broke" in line.get("exc_info", "")]
    assert len(logged) == 1, json_log.lines
    assert logged[0]["request_id"] == "req-4242" and logged[0]["level"] == "ERROR"


class ExplodingMiddleware:
    """Raises ``error`` from inside the middleware chain, outside DRF."""

    error: Exception = RuntimeError("a middleware broke")

    def __init__(self, get_response: Any) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        raise type(self.error)(*self.error.args)  # a fresh one: raising one twice stacks tracebacks


@pytest.mark.parametrize("debug", [False, True])
@pytest.mark.parametrize(
    ("error", "status", "code"),
    [
        (RuntimeError("a middleware broke"), 500, "internal_error"),
        (OperationalError("connection refused: is the server running?"), 503, "unavailable"),
    ],
)
def test_an_error_raised_outside_drf_is_json_under_api_whatever_debug_says(
    db: None, monkeypatch: pytest.MonkeyPatch, json_log: JsonLogLines, error: Exception, status: int, code: str, debug: bool
) -> None:
    monkeypatch.setattr(ExplodingMiddleware, "error", error)
    middleware = [*settings.MIDDLEWARE, f"{__name__}.ExplodingMiddleware"]
    with override_settings(MIDDLEWARE=middleware, DEBUG=debug):
        client = Client(raise_request_exception=False)
        response = client.get(URL)
        admin_page = client.get("/admin/login/")
    assert response.status_code == status
    body = error_of(response)
    assert body["code"] == code and body["request_id"] == response["X-Request-ID"]
    if status == 503:
        assert response["Retry-After"] == "5"
    # Django's own "Internal Server Error" line, with the traceback, carries the request id; and
    # beside the request's own line it is the only one (the JSON answer is not logged again).
    logged = [line for line in json_log.lines if URL in line["message"]]
    assert [line["logger"] for line in logged] == ["django.request", "notifications.request"], logged
    assert str(error) in logged[0]["exc_info"] and logged[1]["status"] == status
    assert logged[0]["request_id"] == logged[1]["request_id"] == response["X-Request-ID"]
    # Outside /api/ Django's pages stay as they are.
    assert admin_page.status_code == 500 and not admin_page["Content-Type"].startswith("application/json")


@pytest.mark.parametrize("debug", [False, True])
@pytest.mark.parametrize("path", ["/api/v1/no-such-thing", "/api/", "/api/v2/notifications", "/api/v1/notifications/a/b/c"])
def test_an_unknown_api_path_is_a_json_404_whatever_debug_says(api: APIClient, path: str, debug: bool) -> None:
    with override_settings(DEBUG=debug):
        response = api.post(path, {}, format="json")
    assert response.status_code == 404
    error = error_of(response)
    assert error["code"] == "not_found" and path in error["message"]


def test_a_sane_request_id_is_kept_and_anything_else_replaced_by_our_own(api: APIClient) -> None:
    assert api.get(URL, HTTP_X_REQUEST_ID="Root=1-67891233-abcdef012345678912345678").headers["X-Request-ID"] == (
        "Root=1-67891233-abcdef012345678912345678"
    )
    for insane in ("x" * 200, "two words", "forged\nlevel=ERROR", ""):
        replaced = api.get(URL, HTTP_X_REQUEST_ID=insane).headers["X-Request-ID"]
        assert replaced != insane and len(replaced) == 32 and int(replaced, 16) >= 0
    assert Client().get("/healthz").headers["X-Request-ID"]


# --- Guessing tokens is throttled per client address ------------------------------------------


@pytest.fixture
def one_window() -> None:
    """Failures are counted per minute (fixed windows): start well inside one, so the test's
    requests are not split across two."""
    wait_until(lambda: time.time() % 60 < 50, timeout=15, message="well inside a minute")


def bad_token_client(address: str = "198.51.100.7", **headers: str) -> APIClient:
    client = APIClient(REMOTE_ADDR=address, **headers)
    client.credentials(HTTP_AUTHORIZATION="Bearer ntf_guessed")
    return client


def test_failed_token_authentications_from_one_address_are_429_past_the_limit_but_a_good_token_is_served(
    db: None, one_window: None
) -> None:
    _, token = make_api_client("acme")
    with override_notifications(API_AUTH_FAILURE_RATE="5/min"):
        guesser = bad_token_client()
        assert [guesser.get(URL).status_code for _ in range(5)] == [401] * 5
        throttled = guesser.get(URL)
        assert throttled.status_code == 429
        assert error_of(throttled)["code"] == "throttled"
        assert 1 <= int(throttled["Retry-After"]) <= 60
        # The guessing stops; a client with a good token from the same address (behind the same
        # proxy) is served, its first request (read from PostgreSQL) as the next ones (known).
        same_address = APIClient(REMOTE_ADDR="198.51.100.7")
        same_address.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
        assert [same_address.get(URL).status_code for _ in range(3)] == [200] * 3
        assert guesser.get(URL).status_code == 429
        # Another address is not touched: a bad token there is a 401.
        assert bad_token_client("203.0.113.9").get(URL).status_code == 401


def test_twenty_five_bad_tokens_then_a_good_one_from_one_address_the_good_one_is_served_the_next_bad_one_is_429(
    db: None, one_window: None
) -> None:
    _, token = make_api_client("acme")
    address = "198.51.100.30"
    with override_notifications(API_AUTH_FAILURE_RATE="20/min"):  # the default
        guesses = [bad_token_client(address).get(URL).status_code for _ in range(25)]
    assert guesses == [401] * 20 + [429] * 5
    good = APIClient(REMOTE_ADDR=address)
    good.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    assert good.get(URL).status_code == 200
    assert bad_token_client(address).get(URL).status_code == 429


def test_past_the_limit_a_guess_is_refused_without_a_query(db: None, one_window: None, django_assert_num_queries: Any) -> None:
    _, token = make_api_client("acme")
    revoked, revoked_token = make_api_client("revoked elsewhere")
    good = APIClient(REMOTE_ADDR="198.51.100.31")
    good.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    with override_notifications(API_AUTH_FAILURE_RATE="2/min"):
        assert [bad_token_client("198.51.100.31").get(URL).status_code for _ in range(3)] == [401, 401, 429]
        assert good.get(URL).status_code == 200  # the active tokens' hashes are read now, once
        with django_assert_num_queries(0):
            answers = [
                APIClient(REMOTE_ADDR="198.51.100.31", HTTP_AUTHORIZATION=f"Bearer ntf_guess{n}").get(URL) for n in range(20)
            ]
        assert [answer.status_code for answer in answers] == [429] * 20
        # A token revoked by another process since the hashes were read costs its holder one read
        # (PostgreSQL has the last word), and is refused as a guess is.
        ApiClient.objects.filter(pk=revoked.pk).update(is_active=False)
        with django_assert_num_queries(1):
            refused = APIClient(REMOTE_ADDR="198.51.100.31", HTTP_AUTHORIZATION=f"Bearer {revoked_token}").get(URL)
        assert refused.status_code == 429


def test_good_tokens_do_not_use_up_their_addresses_failures(db: None, one_window: None) -> None:
    _, token = make_api_client("acme")
    with override_notifications(API_AUTH_FAILURE_RATE="3/min"):
        good = APIClient(REMOTE_ADDR="198.51.100.8")
        good.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
        assert [good.get(URL).status_code for _ in range(10)] == [200] * 10
        assert [bad_token_client("198.51.100.8").get(URL).status_code for _ in range(4)] == [401, 401, 401, 429]


def test_a_client_cannot_get_a_fresh_address_by_sending_x_forwarded_for(db: None, one_window: None) -> None:
    with override_notifications(API_AUTH_FAILURE_RATE="3/min"):
        answers = [bad_token_client(HTTP_X_FORWARDED_FOR=f"192.0.2.{n}").get(URL).status_code for n in range(6)]
    assert answers == [401, 401, 401, 429, 429, 429]


def test_with_the_cache_down_failed_authentications_fail_open_and_are_counted_as_degraded(db: None) -> None:
    def degraded() -> float:
        return REGISTRY.get_sample_value("notifications_degraded_total", {"component": "auth_throttle"}) or 0.0

    before = degraded()
    with override_notifications(API_AUTH_FAILURE_RATE="2/min"), override_settings(CACHES=REFUSING_CACHE):
        answers = [bad_token_client().get(URL).status_code for _ in range(5)]
    assert answers == [401] * 5
    assert degraded() - before == 5


@pytest.mark.parametrize("rate", ["20", "fast/min", "0/min", "20/fortnight", "-3/s"])
def test_an_unreadable_auth_failure_rate_stops_start_up_naming_it(rate: str) -> None:
    with override_notifications(API_AUTH_FAILURE_RATE=rate), pytest.raises(ImproperlyConfigured, match="API_AUTH_FAILURE_RATE"):
        get_config()


# Nothing listens on port 1: connection refused, as from a Redis that is down.
REFUSING_CACHE = {
    "default": {
        "BACKEND": "django_redis.cache.RedisCache",
        "LOCATION": "redis://127.0.0.1:1/0",
        "OPTIONS": {"CLIENT_CLASS": "django_redis.client.DefaultClient", "SOCKET_CONNECT_TIMEOUT": 1, "SOCKET_TIMEOUT": 1},
    }
}


# --- Paths beyond Latin-1 (open-telemetry/opentelemetry-python-contrib#3237) -------------------


def test_a_path_beyond_latin_1_is_a_json_404_through_the_test_client(api: APIClient) -> None:
    # The test client, like Django's server, sets no REQUEST_URI: this was the same 500.
    for path in (f"{URL}/\u2713", "/api/v1/recipients/\u540d\u524d", "/api/v1/\U0001f604"):
        response = api.get(path)
        assert response.status_code == 404 and error_of(response)["code"] == "not_found", path


# --- Hostile bodies and filters ----------------------------------------------------------------


def nested(depth: int) -> dict[str, Any]:
    value: dict[str, Any] = {}
    for _ in range(depth - 1):
        value = {"a": value}
    return value


# Raw JSON text: a lone surrogate is only expressible as a \u escape, and 1e999 as a literal.
HOSTILE_BODIES = {
    "lone surrogate in a metadata key": (
        '{"user_id": "u1", "to": "ann@example.com", "message": "hi", "metadata": {"\\ud800": "x"}}',
        "metadata",
    ),
    "lone surrogate in a metadata value": (
        '{"user_id": "u1", "to": "ann@example.com", "message": "hi", "metadata": {"k": "\\udfff"}}',
        "metadata",
    ),
    "1e999 in metadata": (
        '{"user_id": "u1", "to": "ann@example.com", "message": "hi", "metadata": {"amount": 1e999}}',
        "metadata",
    ),
    "-1e999 in a metadata list": (
        '{"user_id": "u1", "to": "ann@example.com", "message": "hi", "metadata": {"a": [1, -1e999]}}',
        "metadata",
    ),
    "metadata nested 900 deep": (json.dumps({**BODY, "metadata": nested(900)}), "metadata"),
    "lone surrogate in the message": ('{"user_id": "u1", "to": "ann@example.com", "message": "hi \\ud800"}', "message"),
}


def assert_refused(response: Any, field: str) -> None:
    assert response.status_code in (400, 503), (response.status_code, response.content[:300])
    error = error_of(response)
    if response.status_code == 400:
        # The field named; a body too deep for the JSON parser itself is a parse error of the body.
        assert error.get("field") == field or error["code"] == "parse_error", error


@pytest.mark.parametrize("case", list(HOSTILE_BODIES))
def test_a_hostile_body_is_400_naming_the_field_through_the_test_client(api: APIClient, case: str) -> None:
    body, field = HOSTILE_BODIES[case]
    assert_refused(api.post(URL, data=body, content_type="application/json"), field)
    assert Notification.objects.count() == 0


def test_a_lone_surrogate_is_named_by_its_code_point_and_other_non_ascii_text_is_accepted(api: APIClient) -> None:
    # The string fields' surrogate check is our own (a regex instead of DRF's loop over every
    # character); its answer is DRF's, and only a lone surrogate trips it.
    text = "Ihre Bestellung: 12 € — 発送済み 📦 " * 200
    response = api.post(URL, {**BODY, "subject": "Größe 📦", "message": text}, format="json")
    assert response.status_code == 202, response.content[:300]
    assert Notification.objects.get().message == text

    body = '{"user_id": "u1", "to": "ann@example.com", "message": "' + "é" * 50 + ' \\udc05"}'
    response = api.post(URL, data=body, content_type="application/json")
    assert response.status_code == 400
    error = error_of(response)
    assert error["field"] == "message"
    assert "Surrogate characters are not allowed: U+DC05." in json.dumps(error, ensure_ascii=False), error


@pytest.mark.parametrize("field", ["channel", "created_after", "created_before", "status", "user_id"])
def test_an_empty_list_filter_is_400_naming_it_instead_of_not_filtering(api: APIClient, field: str) -> None:
    response = api.get(URL, {field: ""})
    assert response.status_code == 400
    assert error_of(response)["field"] == field


# --- The same through real servers -------------------------------------------------------------


@dataclass
class Live:
    server: WebServer
    token: str

    def request(self, method: str, path: str, **kwargs: Any) -> requests.Response:
        headers = {"Authorization": f"Bearer {self.token}", **kwargs.pop("headers", {})}
        return requests.request(method, self.server.url(path), headers=headers, timeout=30, **kwargs)


@pytest.fixture(scope="module")
def gunicorn(django_db_setup: None) -> Iterator[WebServer]:
    with gunicorn_server() as server:
        yield server


@pytest.fixture(scope="module")
def embedded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[WebServer, str]]:
    with embedded_platform(tmp_path_factory.mktemp("embedded")) as platform:
        yield platform


@pytest.fixture(params=["gunicorn", "runplatform"])
def live(
    request: pytest.FixtureRequest,
    gunicorn: WebServer,
    embedded: tuple[WebServer, str],
    django_db_blocker: Any,
) -> Iterator[Live]:
    client = None
    if request.param == "gunicorn":
        # Committed, for the server to see, and removed with what it owns afterwards: cheaper than
        # a transactional test's flush of every table.
        with django_db_blocker.unblock():
            client, token = make_api_client(f"live-{uuid.uuid4().hex[:8]}")
        server = gunicorn
    else:
        server, token = embedded
    seen = len(server.output())
    yield Live(server, token)
    if client is not None:
        with django_db_blocker.unblock():
            client.delete()
    # No answer of the test was a 500 in disguise (a traceback logged behind a 4xx).
    assert "Traceback" not in server.output()[seen:], server.output()[seen:]


@pytest.mark.parametrize(
    "path", [f"{URL}/%E2%9C%93", "/api/v1/recipients/%E5%90%8D%E5%89%8D", "/api/v1/%F0%9F%98%84", f"{URL}/%C3%A9"]
)
@pytest.mark.services
def test_a_path_beyond_latin_1_is_a_json_404_on_a_real_server(live: Live, path: str) -> None:
    response = live.request("GET", path)
    assert response.status_code == 404
    assert error_of(response)["code"] == "not_found"
    assert response.headers["X-Request-ID"]


@pytest.mark.services
def test_a_path_beyond_latin_1_outside_the_api_is_a_404_not_a_500_on_a_real_server(live: Live) -> None:
    assert live.request("GET", "/%F0%9F%98%84").status_code == 404


@pytest.mark.services
@pytest.mark.parametrize("case", list(HOSTILE_BODIES))
def test_a_hostile_body_is_400_naming_the_field_on_a_real_server(live: Live, case: str) -> None:
    body, field = HOSTILE_BODIES[case]
    response = live.request("POST", URL, data=body.encode(), headers={"Content-Type": "application/json"})
    assert_refused(response, field)
    listed = live.request("GET", URL)
    assert listed.status_code == 200 and listed.json()["results"] == []


@pytest.mark.services
@pytest.mark.parametrize("field", ["channel", "created_after"])
def test_an_empty_list_filter_is_400_naming_it_on_a_real_server(live: Live, field: str) -> None:
    response = live.request("GET", f"{URL}?{field}=")
    assert response.status_code == 400 and error_of(response)["field"] == field


def test_a_burst_of_guessed_tokens_at_a_real_server_gets_no_more_401s_than_the_limit(
    gunicorn: WebServer, transactional_db: None, one_window: None
) -> None:
    # 20 failures a minute by default; 200 guesses at once from one address.
    barrier = threading.Barrier(50)
    answers: Counter[int] = Counter()
    lock = threading.Lock()

    def guess(n: int) -> None:
        session = requests.Session()
        barrier.wait()
        for _ in range(4):
            status = session.get(gunicorn.url(URL), headers={"Authorization": f"Bearer ntf_guess{n}"}, timeout=30).status_code
            with lock:
                answers[status] += 1

    threads = [threading.Thread(target=guess, args=(n,)) for n in range(50)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert answers == Counter({401: 20, 429: 180}), answers


@pytest.mark.services
def test_on_gunicorn_twenty_five_bad_tokens_then_a_good_one_the_good_one_is_served_the_next_bad_one_is_429(
    gunicorn: WebServer, django_db_blocker: Any, one_window: None
) -> None:
    # Every request comes from 127.0.0.1, as every client behind one proxy does.
    with django_db_blocker.unblock():
        client, token = make_api_client(f"behind-the-proxy-{uuid.uuid4().hex[:8]}")
    try:
        session = requests.Session()

        def get(token: str) -> int:
            return session.get(gunicorn.url(URL), headers={"Authorization": f"Bearer {token}"}, timeout=30).status_code

        assert [get(f"ntf_guess{n}") for n in range(25)] == [401] * 20 + [429] * 5
        assert get(token) == 200
        assert get(token) == 200
        assert get("ntf_guess_next") == 429
    finally:
        with django_db_blocker.unblock():
            client.delete()


def test_the_embedded_default_throttles_guessed_tokens_in_its_local_memory_cache(
    embedded: tuple[WebServer, str], one_window: None
) -> None:
    server, _ = embedded
    answers = [
        requests.get(server.url(URL), headers={"Authorization": f"Bearer ntf_guess{n}"}, timeout=30).status_code
        for n in range(22)
    ]
    assert answers == [401] * 20 + [429] * 2
