"""Third-party providers faked at the network boundary: a local HTTP server speaking the Twilio
Messages and FCM HTTP v1 send APIs (and taking any webhook POST), and a local SMTP server."""

from __future__ import annotations

import base64
import collections
import contextlib
import email
import email.policy
import itertools
import json
import re
import select
import socket
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from email.message import EmailMessage
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs

import pytest
from aiosmtpd.controller import Controller
from django.conf import settings
from django.test import override_settings

TWILIO_SID = "AC0123456789abcdef0123456789abcdef"
TWILIO_TOKEN = "twilio-test-token"
TWILIO_FROM = "+15005550006"
FCM_PROJECT = "demo-project"
FCM_TOKEN = "ya29.fake-access-token"

_TWILIO_PATH = re.compile(r"^/2010-04-01/Accounts/(?P<sid>[^/]+)/Messages\.json$")
_FCM_PATH = re.compile(r"^/v1/projects/(?P<project>[^/]+)/messages:send$")
# How long a "hang" reply holds the connection at most; the server's stop() releases it sooner.
HANG_LIMIT_SECONDS = 60.0


def override_notifications(**changes: Any) -> override_settings:
    """override_settings for a few keys of settings.NOTIFICATIONS, keeping the rest as they are now."""
    return override_settings(NOTIFICATIONS={**settings.NOTIFICATIONS, **changes})


@dataclass(frozen=True)
class Reply:
    """What the fake answers to one request; ``hang`` holds the connection without answering."""

    status: int = 200
    body: Any = None
    headers: dict[str, str] = field(default_factory=dict)
    hang: bool = False


def twilio_error(status: int, code: int, message: str) -> Reply:
    return Reply(
        status, {"code": code, "message": message, "more_info": f"https://www.twilio.com/docs/errors/{code}", "status": status}
    )


def fcm_error(status: int, grpc_status: str, message: str, error_code: str | None = None) -> Reply:
    details = [{"@type": "type.googleapis.com/google.firebase.fcm.v1.FcmError", "errorCode": error_code}] if error_code else []
    return Reply(status, {"error": {"code": status, "message": message, "status": grpc_status, "details": details}})


@dataclass(frozen=True)
class RecordedRequest:
    method: str
    path: str
    headers: dict[str, str]  # lower-cased names
    body: bytes
    received_at: float  # time.monotonic()
    reply_status: int
    reply_body: Any

    @property
    def form(self) -> dict[str, str]:
        return {k: v[0] for k, v in parse_qs(self.body.decode(), keep_blank_values=True).items()}

    @property
    def json(self) -> Any:
        return json.loads(self.body)

    @property
    def basic_auth(self) -> tuple[str, str] | None:
        scheme, _, value = self.headers.get("authorization", "").partition(" ")
        if scheme.lower() != "basic":
            return None
        user, _, password = base64.b64decode(value).decode().partition(":")
        return user, password


class FakeProviderServer:
    """Answers like Twilio (form POST, basic auth) and FCM v1 (JSON, bearer token) do, checking
    the request's shape the way they would, and 200s any other POST (webhooks). Replies queued
    with :meth:`reply_next` are used first, in order."""

    def __init__(self) -> None:
        self.requests: list[RecordedRequest] = []
        self._replies: collections.deque[Reply] = collections.deque()
        self._lock = threading.Lock()
        self._release = threading.Event()
        self._ids = itertools.count(1)
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), _handler_for(self))
        self._httpd.daemon_threads = True
        self._httpd.block_on_close = False
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05}, name="fake-provider", daemon=True
        )
        self._thread.start()

    @property
    def host_port(self) -> str:
        return f"127.0.0.1:{self._httpd.server_address[1]}"

    @property
    def base_url(self) -> str:
        return f"http://{self.host_port}"

    def url(self, path: str) -> str:
        return self.base_url + path

    def reply_next(self, *replies: Reply) -> None:
        with self._lock:
            self._replies.extend(replies)

    def stop(self) -> None:
        self._release.set()
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout=5)

    def _answer(self, method: str, path: str, headers: dict[str, str], body: bytes) -> Reply:
        with self._lock:
            scripted = self._replies.popleft() if self._replies else None
        reply = scripted or self._default_reply(path, headers, body)
        with self._lock:
            self.requests.append(RecordedRequest(method, path, headers, body, time.monotonic(), reply.status, reply.body))
        if reply.hang:
            self._release.wait(HANG_LIMIT_SECONDS)
        return reply

    def _default_reply(self, path: str, headers: dict[str, str], body: bytes) -> Reply:
        if match := _TWILIO_PATH.match(path):
            return self._twilio(match["sid"], headers, body)
        if match := _FCM_PATH.match(path):
            return self._fcm(match["project"], headers, body)
        return Reply(200, {"received": True}, {"X-Request-Id": f"wh-{uuid.uuid4().hex}"})

    def _twilio(self, sid: str, headers: dict[str, str], body: bytes) -> Reply:
        expected = "Basic " + base64.b64encode(f"{TWILIO_SID}:{TWILIO_TOKEN}".encode()).decode()
        if sid != TWILIO_SID or headers.get("authorization") != expected:
            return twilio_error(401, 20003, "Authenticate")
        if not headers.get("content-type", "").startswith("application/x-www-form-urlencoded"):
            return twilio_error(400, 20001, "form-encoded body expected")
        form = {k: v[0] for k, v in parse_qs(body.decode()).items()}
        for name, code in (("To", 21604), ("From", 21603), ("Body", 21602)):
            if not form.get(name):
                return twilio_error(400, code, f"A '{name}' is required.")
        message_sid = f"SM{next(self._ids):032x}"
        return Reply(201, {"sid": message_sid, "status": "queued", "to": form["To"], "from": form["From"], "body": form["Body"]})

    def _fcm(self, project: str, headers: dict[str, str], body: bytes) -> Reply:
        if headers.get("authorization") != f"Bearer {FCM_TOKEN}":
            return fcm_error(401, "UNAUTHENTICATED", "Request had invalid authentication credentials.")
        try:
            message = json.loads(body)["message"]
            token = message["token"]
            data = message.get("data", {})
        except (ValueError, KeyError, TypeError):
            return fcm_error(400, "INVALID_ARGUMENT", "Invalid JSON payload received.", "INVALID_ARGUMENT")
        if not token or not all(isinstance(v, str) for v in data.values()):
            return fcm_error(400, "INVALID_ARGUMENT", "Invalid value at 'message.data'", "INVALID_ARGUMENT")
        return Reply(200, {"name": f"projects/{project}/messages/0:{next(self._ids)}%{uuid.uuid4().hex[:16]}"})


def _handler_for(server: FakeProviderServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            headers = {k.lower(): v for k, v in self.headers.items()}
            reply = server._answer("POST", self.path, headers, body)
            if reply.hang:
                return
            payload = b"" if reply.body is None else json.dumps(reply.body).encode()
            self.send_response(reply.status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            for name, value in reply.headers.items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(payload)

        def log_message(self, format: str, *args: Any) -> None:
            pass

        def handle(self) -> None:
            # A client that gave up on a hung reply has closed its socket; that is expected.
            with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                super().handle()

    return Handler


def provider_settings(server: FakeProviderServer) -> dict[str, Any]:
    """The NOTIFICATIONS settings (named as their environment variables) that point SMS and push at
    the fake server, for this process or, as strings, for a worker process's environment."""
    return {
        "TWILIO_API_BASE": server.base_url,
        "TWILIO_ACCOUNT_SID": TWILIO_SID,
        "TWILIO_AUTH_TOKEN": TWILIO_TOKEN,
        "TWILIO_FROM_NUMBER": TWILIO_FROM,
        "FCM_API_BASE": server.base_url,
        "FCM_PROJECT_ID": FCM_PROJECT,
        "FCM_ACCESS_TOKEN": FCM_TOKEN,
        "PROVIDER_TIMEOUT_SECONDS": 5.0,
        "WEBHOOK_TIMEOUT_SECONDS": 5.0,
    }


@pytest.fixture(name="provider_server")
def provider_server_fixture() -> Iterator[FakeProviderServer]:
    """The fake provider server, with the SMS and push settings pointing at it."""
    server = FakeProviderServer()
    try:
        with override_notifications(**provider_settings(server)):
            yield server
    finally:
        server.stop()


# --- SMTP ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ReceivedMail:
    mail_from: str
    rcpt_tos: list[str]
    message: EmailMessage
    peer: Any = None  # the client's (host, port): one per SMTP connection
    received_at: float = field(default_factory=time.monotonic)


class _RecordingHandler:
    def __init__(self) -> None:
        self.received: list[ReceivedMail] = []
        self.refused: set[str] = set()
        self.deferred: set[str] = set()

    async def handle_RCPT(self, server: Any, session: Any, envelope: Any, address: str, rcpt_options: list[str]) -> str:
        if address in self.refused:
            return "550 5.1.1 mailbox unavailable"
        if address in self.deferred:
            return "451 4.2.1 mailbox busy, try again later"
        envelope.rcpt_tos.append(address)
        return "250 OK"

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:
        message = email.message_from_bytes(envelope.original_content or envelope.content, policy=email.policy.default)
        assert isinstance(message, EmailMessage)
        self.received.append(ReceivedMail(envelope.mail_from, list(envelope.rcpt_tos), message, session.peer))
        return "250 Message accepted for delivery"


class _EphemeralPortController(Controller):
    """aiosmtpd's Controller bound to port 0: learn the real port before its readiness probe."""

    def _trigger_server(self) -> None:
        assert self.server is not None
        self.port = self.server.sockets[0].getsockname()[1]  # type: ignore[attr-defined]
        super()._trigger_server()


class LocalSmtpServer:
    def __init__(self) -> None:
        self.handler = _RecordingHandler()
        self.controller = _EphemeralPortController(self.handler, hostname="127.0.0.1", port=0)
        self.controller.start()

    @property
    def port(self) -> int:
        return int(self.controller.port)

    @property
    def received(self) -> list[ReceivedMail]:
        return self.handler.received

    def refuse(self, address: str) -> None:
        self.handler.refused.add(address)

    def defer(self, address: str, *, until_further_notice: bool = True) -> None:
        """Answer RCPT for ``address`` with a 451 (a transient refusal) until told otherwise."""
        if until_further_notice:
            self.handler.deferred.add(address)
        else:
            self.handler.deferred.discard(address)

    def stop(self) -> None:
        self.controller.stop()


@pytest.fixture(name="smtp_server")
def smtp_server_fixture() -> Iterator[LocalSmtpServer]:
    """A real SMTP server on 127.0.0.1 recording what it receives, with Django's SMTP backend
    pointed at it."""
    server = LocalSmtpServer()
    try:
        with override_settings(
            EMAIL_BACKEND="django.core.mail.backends.smtp.EmailBackend",
            EMAIL_HOST="127.0.0.1",
            EMAIL_PORT=server.port,
            EMAIL_HOST_USER="",
            EMAIL_HOST_PASSWORD="",
            EMAIL_USE_TLS=False,
            EMAIL_USE_SSL=False,
            EMAIL_TIMEOUT=5,
        ):
            yield server
    finally:
        server.stop()


# --- A receiver that trickles its answer -------------------------------------------------------


@dataclass
class TrickledPost:
    """One POST a TricklingReceiver took: when it came, how many bytes of the answer went out,
    and when the client cut it (None while it is still open)."""

    path: str
    started_at: float  # time.monotonic()
    idempotency_key: str = ""
    bytes_sent: int = 0
    cut_at: float | None = None


class TricklingReceiver:
    """An HTTP server on 127.0.0.1 that reads a POST and answers it one byte every ``interval``
    seconds, forever: the status line and headers at once (``trickle_headers=False``, as a slow
    receiver does) or they too a byte at a time. It records each post, and how many are open at
    once (``most_open``), until the client gives up."""

    def __init__(self, *, interval: float = 1.0, trickle_headers: bool = False) -> None:
        self.interval = interval
        self.trickle_headers = trickle_headers
        self.posts: list[TrickledPost] = []
        self.open = 0
        self.most_open = 0
        self._lock = threading.Lock()
        self._stopped = threading.Event()
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._listener.settimeout(0.05)
        self._thread = threading.Thread(target=self._serve, name="trickling-receiver", daemon=True)
        self._thread.start()

    @property
    def host_port(self) -> str:
        return f"127.0.0.1:{self._listener.getsockname()[1]}"

    def url(self, path: str = "/hook") -> str:
        return f"http://{self.host_port}{path}"

    def stop(self) -> None:
        self._stopped.set()
        self._thread.join(timeout=5)
        self._listener.close()

    def _serve(self) -> None:
        while not self._stopped.is_set():
            try:
                connection, _ = self._listener.accept()
            except TimeoutError:
                continue
            threading.Thread(target=self._answer, args=(connection,), daemon=True).start()

    def _answer(self, connection: socket.socket) -> None:
        with connection:
            connection.settimeout(5)
            request = b""
            while b"\r\n\r\n" not in request:
                chunk = connection.recv(65536)
                if not chunk:
                    return
                request += chunk
            head, _, body = request.partition(b"\r\n\r\n")
            declared = re.search(rb"(?i)\r\ncontent-length:\s*(\d+)", head)
            length = int(declared[1]) if declared else 0
            while len(body) < length:
                body += connection.recv(65536)
            key = re.search(rb"(?i)\r\nidempotency-key:\s*([^\r]*)", head)
            post = TrickledPost(head.split(b" ")[1].decode(), time.monotonic(), key[1].decode() if key else "")
            with self._lock:
                self.posts.append(post)
                self.open += 1
                self.most_open = max(self.most_open, self.open)
            headers = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n"
            pending = b"" if self.trickle_headers else headers
            trickle = iter((headers if self.trickle_headers else b"") + b"x" * 100000)
            try:
                if pending:
                    connection.sendall(pending)
                    post.bytes_sent += len(pending)
                for byte in trickle:
                    # The client's close shows as a readable socket (EOF) or a failed send.
                    readable, _, _ = select.select([connection], [], [], self.interval)
                    if readable or self._stopped.is_set():
                        break
                    connection.sendall(bytes([byte]))
                    post.bytes_sent += 1
            except OSError:
                pass
            finally:
                post.cut_at = time.monotonic()
                with self._lock:
                    self.open -= 1


@pytest.fixture(name="trickling_receiver")
def trickling_receiver_fixture() -> Iterator[TricklingReceiver]:
    """A TricklingReceiver (headers at once, then a byte a second) the webhook SSRF rules allow."""
    receiver = TricklingReceiver()
    try:
        with override_notifications(WEBHOOK_ALLOW_HOSTS=[receiver.host_port]):
            yield receiver
    finally:
        receiver.stop()
