"""Profiles for ``make bench PROFILE=1``: py-spy sampling one worker process during a drain and the
web process during the accept load, reduced to the functions most often on CPU.

py-spy runs with ``--gil``: only the thread holding the GIL is sampled, so the samples are Python
at work, not threads waiting on PostgreSQL, Redis or RabbitMQ (which release the GIL).

These runs are extra ones, after the measured ones, so sampling never slows a reported figure.
"""

from __future__ import annotations

import contextlib
import re
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from bench.accept_http import web_server, wrk
from bench.cpu import busiest_child, children_of
from bench.drain import noop_drain
from bench.harness import LOG_DIR, BenchProcess, require_tool

FRAME = re.compile(r"^(?P<function>.*) \((?P<file>[^()]*?)(?::\d+)?\)$")


@dataclass(frozen=True)
class Profile:
    what: str
    samples: int
    top_self: list[tuple[str, float]]  # (function (file), share of the samples in it)
    top_ours: list[tuple[str, float]]  # the platform's functions, by share of the samples with them on the stack


def py_spy() -> str:
    beside = Path(sys.executable).parent / "py-spy"  # the venv's, where `make install` puts it
    return (
        str(beside)
        if beside.exists()
        else shutil.which("py-spy") or require_tool("py-spy", "it is a dev dependency: `make install`")
    )


class PySpy:
    """``py-spy record`` of one process until finish(), in raw (collapsed stack) format."""

    def __init__(self, name: str, pid: int) -> None:
        LOG_DIR.mkdir(exist_ok=True)
        self.output = LOG_DIR / f"{name}.folded"
        argv = [
            py_spy(),
            "record",
            "--pid",
            str(pid),
            "--rate",
            "200",
            "--format",
            "raw",
            "--output",
            str(self.output),
            "--nonblocking",
            "--gil",
        ]
        self.process = BenchProcess(f"py-spy-{name}", argv, env={"PATH": "/usr/bin:/bin"})

    def finish(self, what: str, top: int = 15) -> Profile:
        if self.process.alive():
            self.process.process.send_signal(signal.SIGINT)  # py-spy writes its output on SIGINT
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.process.process.wait(timeout=30)
        self.process.stop()
        return summarise(what, self.output.read_text() if self.output.exists() else "", top=top)


def _short(frame: str) -> str:
    match = FRAME.match(frame)
    if match is None:
        return frame
    path = match["file"]
    for marker in ("site-packages/", "/work/main/"):
        path = path.split(marker, 1)[-1]
    return f"{match['function']} ({path})"


def summarise(what: str, folded: str, *, top: int) -> Profile:
    own: Counter[str] = Counter()
    total: Counter[str] = Counter()
    samples = 0
    for line in folded.splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack or not count_text.isdigit():
            continue
        count = int(count_text)
        frames = [_short(frame) for frame in stack.split(";")[1:]]  # the first is the thread
        if not frames:
            continue
        samples += count
        own[frames[-1]] += count
        for frame in set(frames):
            total[frame] += count
    share = (lambda n: n / samples) if samples else (lambda n: 0.0)
    return Profile(
        what=what,
        samples=samples,
        top_self=[(frame, share(n)) for frame, n in own.most_common(top)],
        top_ours=[(frame, share(n)) for frame, n in total.most_common() if "(notifications/" in frame][:top],
    )


def profile_web(*, duration: float, threads: int, connections: int) -> Profile:
    with web_server(workers=1) as (url, server):
        load = {"server": server, "threads": threads, "connections": connections, "accept": True}
        # Warm first: the first requests compile regexes and fill caches once, which is not the steady state.
        wrk(url, duration=3, prefix="profile-warm", **load)
        worker = children_of(server.pid)[0]
        spy = PySpy("web", worker)
        try:
            wrk(url, duration=duration, prefix="profile", **load)
        finally:
            profile = spy.finish("gunicorn worker during the accept load (wrk)")
    return profile


def profile_worker(*, count: int) -> Profile:
    spies: list[PySpy] = []

    def attach(running: BenchProcess) -> None:
        time.sleep(0.3)
        worker = busiest_child(running.pid)
        if worker is not None:
            spies.append(PySpy("worker", worker))

    try:
        noop_drain(count, processes=2, tag="profile", on_start=attach)
    finally:
        profiles = [spy.finish("one dramatiq worker process during the drain (no-op provider)") for spy in spies]
    if not profiles:
        raise SystemExit("bench: found no worker process to profile")
    return profiles[0]
