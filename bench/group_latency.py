"""Accept latency at one request at a time with the group commit on and off (issue #23).

Two gunicorns as deployed (gunicorn.conf.py, 2 workers), one with ACCEPT_GROUP_SIZE at its
default, one with ACCEPT_GROUP_SIZE=1 (each accept alone), both up for the whole part. One
keep-alive connection to each; accepts are sent one after the other, turn about to the two
servers (on, off, then off, on, ...), so that whatever else the machine does meanwhile falls on
both alike, and only one request is ever in flight.
"""

from __future__ import annotations

import http.client
import time
from dataclasses import dataclass
from urllib.parse import urlsplit

from bench.accept_http import api_token, web_server
from bench.accept_sender import accept_post
from bench.drain import notifications_reset, queue_purge
from bench.end_to_end import Latencies

WARMUP = 100  # accepts to each server first: the first requests compile and connect


@dataclass(frozen=True)
class GroupLatency:
    group_size: int  # ACCEPT_GROUP_SIZE when on
    on: Latencies
    off: Latencies
    errors: int


def group_latency(*, requests: int) -> GroupLatency:
    """``requests`` sequential accepts to each server, turn about."""
    from notifications.conf import get_config

    notifications_reset()
    latencies: dict[str, list[float]] = {"on": [], "off": []}
    errors = 0
    token = api_token()
    with (
        web_server(workers=2, name="web-group-on") as (on_url, _),
        web_server(workers=2, name="web-group-off", ACCEPT_GROUP_SIZE="1") as (off_url, _),
    ):
        connections = {
            name: http.client.HTTPConnection(urlsplit(url).hostname, urlsplit(url).port, timeout=30)
            for name, url in (("on", on_url), ("off", off_url))
        }
        for number in range(-WARMUP, requests):
            for name in ("on", "off") if number % 2 == 0 else ("off", "on"):
                started = time.monotonic()
                connections[name], ok = accept_post(connections[name], token=token, key=f"group-{name}-{number}", number=number)
                if number >= 0:
                    latencies[name].append(time.monotonic() - started)
                    errors += 0 if ok else 1
        for connection in connections.values():
            connection.close()
    queue_purge()
    return GroupLatency(
        group_size=get_config().accept_group_size,
        on=Latencies.of(latencies["on"]),
        off=Latencies.of(latencies["off"]),
        errors=errors,
    )
