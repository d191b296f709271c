"""POST accepts from Python over keep-alive connections, each request's latency kept: a fixed
number of them, as fast as the answers come (closed loop: a backlog, or one request at a time) or
each due at its own moment (open loop, ``rate``). wrk measures rates; this is for what wrk cannot
give: an exact count of requests, and every latency of runs to be merged."""

from __future__ import annotations

import http.client
import json
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit


@dataclass(frozen=True)
class Sent:
    latencies: list[float]  # seconds, from when each request was due (open loop) or sent
    errors: int  # requests not answered 202
    seconds: float  # from the first request due to the last answer

    @property
    def rate(self) -> float:
        return len(self.latencies) / self.seconds


def accepts_send(
    url: str, *, count: int, tokens: Sequence[str], prefix: str, connections: int = 16, rate: float | None = None
) -> Sent:
    """POST ``count`` accepts from ``connections`` connections, request i with ``tokens[i % len]``
    (several tokens: their clients in turn), a unique Idempotency-Key and body each."""
    host = urlsplit(url)
    latencies: list[float] = []
    errors = [0]
    lock = threading.Lock()
    start = time.monotonic() + 0.2

    def sender(lane: int) -> None:
        connection = http.client.HTTPConnection(host.hostname, host.port, timeout=30)
        for index in range(lane, count, connections):
            due = start + index / rate if rate else time.monotonic()
            delay = due - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            connection, ok = accept_post(connection, token=tokens[index % len(tokens)], key=f"{prefix}-{index}", number=index)
            elapsed = time.monotonic() - due
            with lock:
                latencies.append(elapsed)
                errors[0] += 0 if ok else 1
        connection.close()

    if not rate:
        time.sleep(max(0.0, start - time.monotonic()))
    threads = [threading.Thread(target=sender, args=(lane,)) for lane in range(connections)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return Sent(latencies=latencies, errors=errors[0], seconds=time.monotonic() - start)


def accept_post(
    connection: http.client.HTTPConnection, *, token: str, key: str, number: int, content: dict[str, Any] | None = None
) -> tuple[http.client.HTTPConnection, bool]:
    """POST one accept (``key`` its Idempotency-Key, ``number`` its recipient's) on ``connection``:
    the connection to use next (a new one after an error) and whether it was answered 202.
    ``content``: what it sends (a template and its data), instead of a subject and message."""
    sent = content or {"subject": "Bench", "message": f"Hello {key}."}
    body = json.dumps({"user_id": f"{key}-u", "to": f"e{number}@example.com", **sent})
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json", "Idempotency-Key": key}
    try:
        connection.request("POST", "/api/v1/notifications", body=body, headers=headers)
        response = connection.getresponse()
        response.read()
        return connection, response.status == 202
    except (OSError, http.client.HTTPException):
        connection.close()
        return http.client.HTTPConnection(connection.host, connection.port, timeout=30), False
