"""Accept over HTTP against the server as deployed: gunicorn with gunicorn.conf.py, loaded by wrk.

``POST /api/v1/notifications`` (a unique Idempotency-Key and body per request, bench/accept.lua)
against ``GET /healthz`` on the same server in the same run as the baseline, each for a fixed
duration after a short warm-up; no worker runs meanwhile (the messages wait in the queue, which
is purged after each run).
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import urllib.request
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from functools import cache

from bench.cpu import tree_cpu
from bench.harness import LOG_DIR, ROOT, BenchProcess, free_port, log, platform_env, require_tool, wait_for

LUA = ROOT / "bench" / "accept.lua"


@dataclass(frozen=True)
class Load:
    requests: int
    seconds: float
    p50_ms: float
    p90_ms: float
    p99_ms: float
    errors: int
    cpu_seconds: float  # of the web server's processes

    @property
    def rate(self) -> float:
        return self.requests / self.seconds

    @property
    def cpu_ms_per_request(self) -> float:
        return self.cpu_seconds * 1000 / self.requests


@cache
def api_token() -> str:
    """The bearer token of the API client the HTTP parts send as (made once per run)."""
    from notifications import services

    client = services.api_client_get_or_create(name="bench-http")
    return services.api_client_rotate_token(client=client)


def _healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/healthz", timeout=2) as response:
            return bool(response.status == 200)
    except OSError:
        return False


@contextlib.contextmanager
def web_server(*, workers: int = 1, gthread: bool = False, name: str = "web", **env: str) -> Iterator[tuple[str, BenchProcess]]:
    """``python -m gunicorn platform.asgi:application`` as the image runs it (gunicorn.conf.py: its
    processes, uvicorn workers, 16 threads each for the WSGI site), on a free port of 127.0.0.1, with
    ``--workers`` and the environment's ``env`` as asked; ``gthread``: the WSGI application on
    gunicorn's own threads instead, as served before the inbox's streams (for bench/inbox.py)."""
    port = free_port()
    argv = [sys.executable, "-m", "gunicorn", "--config", "gunicorn.conf.py", "--bind", f"127.0.0.1:{port}"]
    # A control socket of its own: gunicorn's default (~/.gunicorn/gunicorn.ctl) is one per user.
    argv += ["--workers", str(workers), "--control-socket", str(LOG_DIR / f"gunicorn-{port}.ctl")]
    application = ["--worker-class", "gthread", "platform.wsgi:application"] if gthread else ["platform.asgi:application"]
    label = f"{name}-w{workers}" + ("-gthread" if gthread else "")
    with BenchProcess(label, [*argv, *application], env=platform_env(**{"LOG_LEVEL": "INFO", **env})) as server:
        url = f"http://127.0.0.1:{port}"
        wait_for(lambda: _healthy(url), timeout=60, what="gunicorn to answer /healthz", interval=0.2, watch=server)
        yield url, server


def wrk(
    url: str,
    *,
    server: BenchProcess,
    duration: float,
    threads: int,
    connections: int,
    accept: bool,
    prefix: str,
    tokens: Sequence[str] = (),
) -> Load:
    """wrk's load for ``duration``: the accept (as the client of ``tokens`` in turn; default the
    bench's one client) or GET /healthz."""
    require_tool("wrk", "run `make bench` (bench/wrk.sh installs it) or apt-get install wrk")
    path = "/api/v1/notifications" if accept else "/healthz"
    env = {
        "BENCH_MODE": "accept" if accept else "get",
        "BENCH_TOKENS": ",".join(tokens or [api_token()]) if accept else "",
        "BENCH_KEY_PREFIX": prefix,
    }
    argv = ["wrk", f"-t{threads}", f"-c{connections}", f"-d{duration:g}s", "--timeout", "10s", "-s", str(LUA), f"{url}{path}"]
    cpu_before = tree_cpu(server.pid)
    done = subprocess.run(argv, capture_output=True, text=True, env=platform_env(**env), timeout=duration + 60)
    cpu = tree_cpu(server.pid) - cpu_before
    line = next((line for line in done.stdout.splitlines() if line.startswith("BENCH ")), None)
    if done.returncode != 0 or line is None:
        raise SystemExit(f"bench: wrk failed ({done.returncode}):\n{done.stdout}\n{done.stderr}")
    totals = json.loads(line.removeprefix("BENCH "))
    errors = sum(totals[name] for name in ("connect_errors", "read_errors", "write_errors", "status_errors", "timeouts"))
    if errors:
        log(f"wrk {path}: {errors} errors of {totals['requests']} requests: {totals}; server log:\n{server.tail(10)}")
    return Load(
        requests=totals["requests"],
        seconds=totals["duration_us"] / 1e6,
        p50_ms=totals["p50_us"] / 1000,
        p90_ms=totals["p90_us"] / 1000,
        p99_ms=totals["p99_us"] / 1000,
        errors=errors,
        cpu_seconds=cpu,
    )


@dataclass(frozen=True)
class AcceptRun:
    workers: int
    healthz: Load
    accept: Load
    group_mean: float | None = None  # single accepts per group commit during the accept run (/metrics)

    @property
    def ratio(self) -> float:
        return self.accept.rate / self.healthz.rate


def accept_http(*, workers: int, duration: float, threads: int, connections: int, warmup: float = 3.0) -> AcceptRun:
    """Requests per second and latency of the accept and of /healthz, on one gunicorn."""
    from bench.drain import notifications_reset, queue_purge
    from notifications.models import Notification

    notifications_reset()
    tag = f"w{workers}"
    with web_server(workers=workers) as (url, server):
        load = {"server": server, "threads": threads, "connections": connections}
        wrk(url, duration=warmup, accept=False, prefix=f"{tag}-warm", **load)
        wrk(url, duration=warmup, accept=True, prefix=f"{tag}-warm", **load)
        healthz = wrk(url, duration=duration, accept=False, prefix=f"{tag}-healthz", **load)
        groups_before = accept_groups(url)
        accept = wrk(url, duration=duration, accept=True, prefix=f"{tag}-accept", **load)
        groups_after = accept_groups(url)
    stored = Notification.objects.filter(idempotency_key__startswith=f"{tag}-accept-").count()
    if stored < accept.requests - accept.errors:
        raise SystemExit(
            f"bench: {accept.requests - accept.errors} accepts answered 202 but only {stored} notifications are stored"
        )
    queue_purge()
    written, groups = (after - before for after, before in zip(groups_after, groups_before, strict=True))
    return AcceptRun(workers=workers, healthz=healthz, accept=accept, group_mean=written / groups if groups else None)


def accept_groups(url: str) -> tuple[float, float]:
    """(accepts, groups) written by group commits so far, from the web tier's /metrics."""
    text = urllib.request.urlopen(f"{url}/metrics", timeout=10).read().decode()
    values = dict.fromkeys(("notifications_accept_group_size_sum", "notifications_accept_group_size_count"), 0.0)
    for line in text.splitlines():
        name, _, value = line.partition(" ")
        if name in values:
            values[name] = float(value)
    return values["notifications_accept_group_size_sum"], values["notifications_accept_group_size_count"]
