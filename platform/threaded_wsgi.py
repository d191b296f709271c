"""The WSGI site on the ASGI server: each request runs whole in one thread of a pool.

The request body is read on the event loop first (bounded: past MAX_BODY_BYTES the answer is 413
without the application), then one hop to a thread runs the application and reads its answer,
and the loop writes it: one thread hop a request. a2wsgi's general adapter (whose environ builder
this uses) makes a hop for the body, for the answer's start, for each chunk and for its end,
blocking the thread on the loop each time (bench/inbox.py measures the fronts). An answer larger
than INLINE_BYTES (a static file) is sent a chunk at a time.
"""

from __future__ import annotations

import asyncio
import contextvars
import tempfile
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from a2wsgi.wsgi import build_environ

# Bodies above this are spooled to a temporary file, as Django does with uploads.
SPOOL_BYTES = 1024 * 1024
# Larger than anything the API or the admin takes (Django refuses more at DATA_UPLOAD_MAX_MEMORY_SIZE).
MAX_BODY_BYTES = 32 * 1024 * 1024
# An answer up to this size is read whole in its thread and sent in one write.
INLINE_BYTES = 256 * 1024

_TOO_LARGE = b'{"error":{"code":"request_too_large","message":"the request body is too large"}}'


class ThreadedWSGI:
    def __init__(self, application: Any, *, threads: int) -> None:
        self.application = application
        self.executor = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="web")

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            await _lifespan(receive, send)
            return
        body = await _body(receive)
        if body is None:
            await _answer(send, 413, [(b"content-type", b"application/json")], _TOO_LARGE)
            return
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


async def _body(receive: Any) -> Any:
    """The request body in a spooled file, or None when it is over MAX_BODY_BYTES."""
    body = tempfile.SpooledTemporaryFile(max_size=SPOOL_BYTES)  # noqa: SIM115 - closed by the caller
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            break
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > MAX_BODY_BYTES:
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
