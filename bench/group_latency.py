"""Accept latency at one request at a time with the group commit on and off (issue #23).

Two gunicorns as deployed (gunicorn.conf.py, 2 workers), one with ACCEPT_GROUP_SIZE at its
default, one with ACCEPT_GROUP_SIZE=1 (each accept alone), both up for the whole part. One
keep-alive connection sends accepts one after the other (bench/accept_sender.py), in rounds that
alternate between the two servers (on, off, then off, on, ...) so that whatever else the machine
does meanwhile falls on both; every latency of a setting's rounds is merged into its p50 and p99.
"""

from __future__ import annotations

from dataclasses import dataclass

from bench.accept_http import api_token, web_server
from bench.accept_sender import accepts_send
from bench.drain import notifications_reset, queue_purge
from bench.end_to_end import Latencies

WARMUP = 100  # accepts before the rounds, on each server: first requests compile and connect


@dataclass(frozen=True)
class GroupLatency:
    group_size: int  # ACCEPT_GROUP_SIZE when on
    rounds: int
    on: Latencies
    off: Latencies
    errors: int


def group_latency(*, requests: int, rounds: int = 4) -> GroupLatency:
    """``requests`` sequential accepts to each server, in ``rounds`` alternating rounds."""
    from notifications.conf import get_config

    notifications_reset()
    latencies: dict[str, list[float]] = {"on": [], "off": []}
    errors = 0
    with (
        web_server(workers=2, name="web-group-on") as (on_url, _),
        web_server(workers=2, name="web-group-off", ACCEPT_GROUP_SIZE="1") as (off_url, _),
    ):
        urls = {"on": on_url, "off": off_url}
        token = [api_token()]
        for name, url in urls.items():
            accepts_send(url, count=WARMUP, tokens=token, prefix=f"group-{name}-warm", connections=1)
        for number in range(rounds):
            for name in ("on", "off") if number % 2 == 0 else ("off", "on"):
                sent = accepts_send(
                    urls[name], count=requests // rounds, tokens=token, prefix=f"group-{name}-{number}", connections=1
                )
                latencies[name] += sent.latencies
                errors += sent.errors
    queue_purge()
    return GroupLatency(
        group_size=get_config().accept_group_size,
        rounds=rounds,
        on=Latencies.of(latencies["on"]),
        off=Latencies.of(latencies["off"]),
        errors=errors,
    )
