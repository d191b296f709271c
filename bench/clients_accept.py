"""Accept over HTTP with 16 clients in turn against one client (issue #23), and against GET
/healthz, on gunicorn as deployed (gunicorn.conf.py: 2 workers) and with one worker.

wrk as in bench/accept_http.py (bench/accept.lua); with several tokens each request is the next
client's, round robin, so whatever the web keeps per client (its token, its throttle window, its
categories, its group commit) is kept for 16 at once, and a group commit gathers one client's
requests only. Each load starts from an empty queue; no worker runs.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from functools import cache

from bench.accept_http import Load, web_server, wrk
from bench.drain import notifications_reset, queue_purge

CLIENTS = 16


@cache
def client_tokens(count: int = CLIENTS) -> tuple[str, ...]:
    """The bearer tokens of ``count`` API clients besides the bench's one (made once per run)."""
    from notifications import services

    clients = [services.api_client_get_or_create(name=f"bench-http-{number}") for number in range(1, count + 1)]
    return tuple(services.api_client_rotate_token(client=client) for client in clients)


@dataclass(frozen=True)
class ClientsRun:
    workers: int
    healthz: Load
    one: Load  # every request the bench's one client's
    many: Load  # CLIENTS clients in turn

    @property
    def many_ratio(self) -> float:
        return self.many.rate / self.one.rate

    @property
    def healthz_ratio(self) -> float:
        return self.one.rate / self.healthz.rate


def clients_accept(
    *, workers: int, duration: float, threads: int, connections: int, rounds: int = 2, warmup: float = 3.0
) -> ClientsRun:
    """The three loads for ``duration`` seconds each, in ``rounds`` rounds whose order turns
    (healthz, one, many; then many, one, healthz; ...), so that what else the machine does
    meanwhile falls on all three: each load's figures are its rounds' together."""
    tag = f"clients-w{workers}"
    loads: dict[str, list[Load]] = {"healthz": [], "one": [], "many": []}
    tokens = {"healthz": (), "one": (), "many": client_tokens()}
    notifications_reset()  # not between the loads: the requests wrk left in flight are still being written
    with web_server(workers=workers, name="web-clients") as (url, server):
        load = {"server": server, "threads": threads, "connections": connections}
        for name in loads:
            wrk(url, duration=warmup, accept=name != "healthz", prefix=f"{tag}-warm-{name}", tokens=tokens[name], **load)
        for number in range(rounds):
            for name in list(loads) if number % 2 == 0 else reversed(loads):
                queue_purge()
                loads[name].append(
                    wrk(
                        url,
                        duration=duration / rounds,
                        accept=name != "healthz",
                        prefix=f"{tag}-{name}-{number}",
                        tokens=tokens[name],
                        **load,
                    )
                )
    queue_purge()
    return ClientsRun(workers=workers, **{name: _together(runs) for name, runs in loads.items()})


def _together(runs: list[Load]) -> Load:
    """Rounds of one load as one: their requests, time and CPU added up, each percentile the
    median of the rounds' (wrk gives percentiles, not the latencies to merge)."""
    return Load(
        requests=sum(run.requests for run in runs),
        seconds=sum(run.seconds for run in runs),
        p50_ms=statistics.median(run.p50_ms for run in runs),
        p90_ms=statistics.median(run.p90_ms for run in runs),
        p99_ms=statistics.median(run.p99_ms for run in runs),
        errors=sum(run.errors for run in runs),
        cpu_seconds=sum(run.cpu_seconds for run in runs),
    )
