"""A total deadline for outgoing HTTP: connect, send and the whole answer, not each socket operation.

urllib3's (and so requests') timeouts bound each socket operation, so a receiver that sends its
headers and then one byte a second is never cut. Here every socket read and write made inside
``http_deadline(seconds)`` first shrinks the socket's timeout to what is left of the deadline,
and fails at once (``TimeoutError``, which urllib3 reports as a read timeout) once nothing is
left. The work stops in the thread that does it: no watchdog, nothing left running.

The pools below make their connections' sockets do so; a socket used outside a deadline behaves
as any other.
"""

from __future__ import annotations

import contextlib
import socket
import ssl
import time
from collections.abc import Iterator
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

import urllib3
from urllib3.connection import HTTPConnection, HTTPSConnection

_deadline: ContextVar[Deadline | None] = ContextVar("http_deadline", default=None)


@dataclass(frozen=True)
class Deadline:
    seconds: float
    at: float  # time.monotonic()

    def remaining(self) -> float:
        return self.at - time.monotonic()

    def expired(self) -> bool:
        return self.remaining() <= 0

    def per_operation(self) -> float:
        """The timeout of a socket operation started now: none past the deadline."""
        return max(0.001, min(self.seconds, self.remaining()))

    def timeout(self) -> urllib3.Timeout:
        return urllib3.Timeout(connect=self.per_operation(), read=self.per_operation())

    def exceeded(self) -> str:
        return f"deadline of {self.seconds:g}s exceeded"


@contextlib.contextmanager
def http_deadline(seconds: float) -> Iterator[Deadline]:
    """Bound every socket operation of this thread's HTTP calls inside the block by one deadline,
    ``seconds`` from now."""
    deadline = Deadline(seconds, time.monotonic() + seconds)
    token = _deadline.set(deadline)
    try:
        yield deadline
    finally:
        _deadline.reset(token)


def _bound(sock: socket.socket) -> None:
    """Shrink the socket's timeout to what is left of the current deadline; fail when none is.

    Taking the smaller of the timeout already set and what is left is enough: what is left only
    shrinks, and urllib3 sets the per-operation timeout again at the start of every request."""
    deadline = _deadline.get()
    if deadline is None:
        return
    left = deadline.remaining()
    if left <= 0:
        raise TimeoutError(deadline.exceeded())
    current = socket.socket.gettimeout(sock)
    if current is None or current > left:
        socket.socket.settimeout(sock, left)


class _Bounded:
    """Every read and write of a socket bounded by the current deadline first. No slots of its own,
    nor its subclasses: an open socket's class is switched to one of them (the same layout)."""

    __slots__ = ()

    def recv(self, *args: Any) -> bytes:
        _bound(self)  # type: ignore[arg-type]
        return super().recv(*args)  # type: ignore[misc]

    def recv_into(self, *args: Any) -> int:
        _bound(self)  # type: ignore[arg-type]
        return super().recv_into(*args)  # type: ignore[misc]

    def send(self, *args: Any) -> int:
        _bound(self)  # type: ignore[arg-type]
        return super().send(*args)  # type: ignore[misc]

    def sendall(self, *args: Any) -> None:
        # A plain socket's sendall has one timeout for the whole call (CPython 3.5+); an
        # SSLSocket's loops over send, each bounded again. Either way, bounding it once suffices.
        _bound(self)  # type: ignore[arg-type]
        super().sendall(*args)  # type: ignore[misc]


class _DeadlineSocket(_Bounded, socket.socket):
    __slots__ = ()


class _DeadlineSSLSocket(_Bounded, ssl.SSLSocket):
    __slots__ = ()


class DeadlineHTTPConnection(HTTPConnection):
    def _new_conn(self) -> socket.socket:
        sock = super()._new_conn()
        sock.__class__ = _DeadlineSocket
        return sock


class DeadlineHTTPSConnection(HTTPSConnection):
    def _new_conn(self) -> socket.socket:
        sock = super()._new_conn()
        sock.__class__ = _DeadlineSocket  # bounds the TLS handshake's start too
        return sock

    def connect(self) -> None:
        super().connect()
        if type(self.sock) is ssl.SSLSocket:
            self.sock.__class__ = _DeadlineSSLSocket


class DeadlineHTTPConnectionPool(urllib3.HTTPConnectionPool):
    ConnectionCls = DeadlineHTTPConnection


class DeadlineHTTPSConnectionPool(urllib3.HTTPSConnectionPool):
    ConnectionCls = DeadlineHTTPSConnection


DEADLINE_POOL_CLASSES: dict[str, type[urllib3.HTTPConnectionPool]] = {
    "http": DeadlineHTTPConnectionPool,
    "https": DeadlineHTTPSConnectionPool,
}
