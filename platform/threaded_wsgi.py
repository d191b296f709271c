"""The WSGI site on the ASGI server: each request runs whole in one thread of a pool.

The request body is read on the event loop first (bounded by the API's own upload limit: a body
that declares more is answered 413 before a byte of it is read, one that sends more is cut off
there), then one hop to a thread runs the application and reads its answer,
and the loop writes it: one thread hop a request. a2wsgi's general adapter (whose environ builder
this uses) makes a hop for the body, for the answer's start, for each chunk and for its end,
blocking the thread on the loop each time (bench/inbox.py measures the fronts). An answer larger
than INLINE_BYTES (a static file) is sent a chunk at a time.

The pool's queue is bounded too: past ``threads + queue_limit`` requests admitted to the pool and
not yet answered, a new one is answered 503 with Retry-After at once, so a burst (or one client's
flood) cannot pile up requests that would be answered after their callers gave up, each holding
its body in memory meanwhile.
"""

from __future__ import annotations

import asyncio
import contextvars
import tempfile
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from a2wsgi.wsgi import build_environ

# Bodies above this are spooled to a temporary file, as Django does with uploads: what a body
# being read holds in memory, however many are read at once.
SPOOL_BYTES = 64 * 1024
# An answer up to this size is read whole in its thread and sent in one write.
INLINE_BYTES = 256 * 1024

_JSON = [(b"content-type", b"application/json")]
_TOO_LARGE = b'{"error":{"code":"request_too_large","message":"the request body is over the upload limit"}}'
_BUSY = b'{"error":{"code":"unavailable","message":"the server is busy; try again shortly"}}'


class ThreadedWSGI:
    def __init__(self, application: Any, *, threads: int, queue_limit: int, max_body_bytes: int) -> None:
        self.application = application
        self.executor = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="web")
        self.capacity = threads + queue_limit
        self.max_body_bytes = max_body_bytes
        # Requests handed to the pool and not yet answered; only the event loop's thread touches it.
        self.admitted = 0

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            await _lifespan(receive, send)
            return
        declared = _content_length(scope)
        if declared is not None and declared > self.max_body_bytes:
            await _answer(send, 413, [*_JSON, (b"connection", b"close")], _TOO_LARGE)
            return
        try:
            body = await _body(receive, self.max_body_bytes)
        except _ClientGone:
            return  # left while sending its body: nothing to answer, nothing to run
        if body is None:
            await _answer(send, 413, [*_JSON, (b"connection", b"close")], _TOO_LARGE)
            return
        if self.admitted >= self.capacity:
            body.close()
            await _answer(send, 503, [*_JSON, (b"retry-after", b"1")], _BUSY)
            return
        self.admitted += 1
        loop = asyncio.get_running_loop()
        run = contextvars.copy_context().run
        try:
            environ = build_environ(scope, body)
            status, headers, chunks, rest = await loop.run_in_executor(self.executor, run, self._call, environ)  # type: ignore[arg-type]
            await send({"type": "http.response.start", "status": status, "headers": headers})
            await send({"type": "http.response.body", "body": b"".join(chunks), "more_body": rest is not None})
            while rest is not None:
                chunk = await loop.run_in_executor(self.executor, next, rest, None)
                await send({"type": "http.response.body", "body": chunk or b"", "more_body": chunk is not None})
                rest = None if chunk is None else rest
        finally:
            self.admitted -= 1
            body.close()

    def _call(self, environ: dict[str, Any]) -> tuple[int, list[tuple[bytes, bytes]], list[bytes], Iterator[bytes] | None]:
        """Run the application in this thread: its status, headers, the answer read so far, and the
        rest of a large one as an iterator that closes the application's iterable at its end. The
        rest is read by whichever pool thread is free: only a static file's chunks come that way here
        (no view streams from the database through this site; the inbox's stream is not on it)."""
        started: list[Any] = []
        chunks: list[bytes] = []

        def start_response(status: str, headers: list[tuple[str, str]], exc_info: Any = None) -> Any:
            started[:] = [int(status.split(" ", 1)[0]), [(k.lower().encode("latin1"), v.encode("latin1")) for k, v in headers]]
            return chunks.append

        iterable = self.application(environ, start_response)
        iterator = iter(iterable)
        size = 0
        try:
            for chunk in iterator:
                chunks.append(chunk)
                size += len(chunk)
                if size > INLINE_BYTES:
                    return started[0], started[1], chunks, _closing(iterator, iterable)
        except BaseException:
            getattr(iterable, "close", lambda: None)()
            raise
        getattr(iterable, "close", lambda: None)()
        return started[0], started[1], chunks, None


def _closing(iterator: Iterator[bytes], iterable: Any) -> Iterator[bytes]:
    try:
        yield from iterator
    finally:
        getattr(iterable, "close", lambda: None)()


def _content_length(scope: Any) -> int | None:
    for name, value in scope.get("headers", ()):
        if name == b"content-length":
            return int(value) if value.isdigit() else None
    return None


class _ClientGone(Exception):
    """The client disconnected before its body was read whole."""


async def _body(receive: Any, max_bytes: int) -> Any:
    """The request body in a spooled file, or None when it is over ``max_bytes``."""
    body = tempfile.SpooledTemporaryFile(max_size=SPOOL_BYTES)  # noqa: SIM115 - closed by the caller
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            body.close()
            raise _ClientGone
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > max_bytes:
            body.close()
            return None
        body.write(chunk)
        if not message.get("more_body", False):
            break
    body.seek(0)
    return body


async def _answer(send: Any, status: int, headers: list[tuple[bytes, bytes]], content: bytes) -> None:
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": content})


async def _lifespan(receive: Any, send: Any) -> None:
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            await send({"type": "lifespan.shutdown.complete"})
            return
