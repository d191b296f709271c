"""The web site's server side (platform/threaded_wsgi.py) bounds what a client can make it hold:
a body over the API's upload limit is refused before it is read, and requests waiting for a
thread are bounded, the rest answered 503 at once."""

from __future__ import annotations

import asyncio
import json
import threading
from platform.threaded_wsgi import ThreadedWSGI
from typing import Any

LIMIT = 1000


def hello(environ: dict[str, Any], start_response: Any) -> list[bytes]:
    body = environ["wsgi.input"].read()
    start_response("200 OK", [("Content-Type", "text/plain")])
    return [b"read %d" % len(body)]


class Exchange:
    """One request to the ASGI app: the body's chunks it may read, and what it answered."""

    def __init__(self, chunks: list[bytes], *, content_length: int | None = None) -> None:
        headers = [(b"host", b"testserver")]
        if content_length is not None:
            headers.append((b"content-length", str(content_length).encode()))
        self.scope = {
            "type": "http",
            "method": "POST",
            "path": "/api/v1/notifications",
            "raw_path": b"/api/v1/notifications",
            "query_string": b"",
            "headers": headers,
            "server": ("testserver", 80),
            "client": ("127.0.0.1", 5000),
            "scheme": "http",
            "root_path": "",
            "http_version": "1.1",
        }
        self.chunks = list(chunks)
        self.reads = 0
        self.sent: list[dict[str, Any]] = []

    async def receive(self) -> dict[str, Any]:
        self.reads += 1
        chunk = self.chunks.pop(0)
        return {"type": "http.request", "body": chunk, "more_body": bool(self.chunks)}

    async def send(self, message: dict[str, Any]) -> None:
        self.sent.append(message)

    async def run(self, app: ThreadedWSGI) -> None:
        await app(self.scope, self.receive, self.send)

    @property
    def status(self) -> int:
        return int(self.sent[0]["status"])

    @property
    def headers(self) -> dict[bytes, bytes]:
        return dict(self.sent[0]["headers"])

    @property
    def body(self) -> bytes:
        return b"".join(message.get("body", b"") for message in self.sent[1:])


def site(application: Any = hello, *, threads: int = 2, queue_limit: int = 2) -> ThreadedWSGI:
    return ThreadedWSGI(application, threads=threads, queue_limit=queue_limit, max_body_bytes=LIMIT)


def test_a_body_declared_over_the_upload_limit_is_413_before_a_byte_of_it_is_read() -> None:
    exchange = Exchange([b"x" * 600, b"x" * 600], content_length=1200)
    asyncio.run(exchange.run(site()))
    assert exchange.status == 413
    assert exchange.reads == 0
    assert json.loads(exchange.body)["error"]["code"] == "request_too_large"


def test_a_body_sent_past_the_upload_limit_without_a_length_is_cut_off_there() -> None:
    exchange = Exchange([b"x" * 400] * 100)  # 40 KB, chunked
    asyncio.run(exchange.run(site()))
    assert exchange.status == 413
    assert exchange.reads == 3  # 1,200 bytes read: over the limit, and no more


def test_a_body_at_the_limit_reaches_the_application() -> None:
    exchange = Exchange([b"x" * 500, b"x" * 500], content_length=LIMIT)
    asyncio.run(exchange.run(site()))
    assert (exchange.status, exchange.body) == (200, b"read 1000")


def test_past_the_threads_and_the_queue_limit_a_request_is_503_with_retry_after_at_once() -> None:
    release = threading.Event()
    started = threading.Semaphore(0)

    def held(environ: dict[str, Any], start_response: Any) -> list[bytes]:
        started.release()
        assert release.wait(timeout=30)
        start_response("200 OK", [])
        return [b"done"]

    app = site(held, threads=1, queue_limit=1)

    async def scenario() -> list[Exchange]:
        running, queued, refused = Exchange([b""]), Exchange([b""]), Exchange([b""])
        first = asyncio.create_task(running.run(app))
        await asyncio.to_thread(started.acquire, timeout=10)  # the one thread is busy
        second = asyncio.create_task(queued.run(app))
        deadline = asyncio.get_running_loop().time() + 10
        while app.admitted < 2:  # the second waits in the pool's queue
            assert asyncio.get_running_loop().time() < deadline, "the second request was not queued"
            await asyncio.sleep(0.001)
        await asyncio.wait_for(refused.run(app), timeout=5)  # answered without waiting for a thread
        assert refused.sent and not running.sent and not queued.sent
        release.set()
        await asyncio.wait_for(asyncio.gather(first, second), timeout=30)
        return [running, queued, refused]

    running, queued, refused = asyncio.run(scenario())
    assert refused.status == 503
    assert refused.headers[b"retry-after"] == b"1"
    assert json.loads(refused.body)["error"]["code"] == "unavailable"
    assert (running.status, queued.status) == (200, 200)
    assert app.admitted == 0


def test_a_client_gone_before_its_body_was_read_whole_runs_nothing_and_gets_no_answer() -> None:
    ran: list[bool] = []

    def counting(environ: dict[str, Any], start_response: Any) -> list[bytes]:
        ran.append(True)
        return hello(environ, start_response)

    exchange = Exchange([b"x" * 100])

    async def gone() -> dict[str, Any]:
        return {"type": "http.disconnect"}

    first = exchange.receive

    async def receive() -> dict[str, Any]:
        if exchange.reads == 0:
            message = await first()
            return {**message, "more_body": True}
        return await gone()

    asyncio.run(site(counting)(exchange.scope, receive, exchange.send))
    assert ran == [] and exchange.sent == []
