"""What the bench ran on, for RESULTS.md: CPUs, memory, kernel, the services' and tools' versions, load."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path


def _out(command: list[str]) -> str:
    try:
        return subprocess.run(command, capture_output=True, text=True, timeout=20).stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        return "?"


def facts() -> list[str]:
    """Lines for RESULTS.md: the machine, the services' versions, the tools'."""
    cpuinfo = Path("/proc/cpuinfo").read_text()
    model = next((line.split(":", 1)[1].strip() for line in cpuinfo.splitlines() if line.startswith("model name")), "?")
    memory = next(
        (line.split()[1] for line in Path("/proc/meminfo").read_text().splitlines() if line.startswith("MemTotal")), "0"
    )
    postgres = _out(["psql", "-h", "127.0.0.1", "-U", "postgres", "-d", "postgres", "-AtXc", "SHOW server_version"])
    rabbit = _out(["rabbitmqctl", "-q", "version"])
    redis = next(
        (
            line.split(":", 1)[1]
            for line in _out(["redis-cli", "-h", "127.0.0.1", "info", "server"]).splitlines()
            if line.startswith("redis_version")
        ),
        "?",
    )
    return [
        f"{os.cpu_count()} CPUs ({model}), {int(memory) // 1024 // 1024} GiB, Linux {os.uname().release}",
        f"PostgreSQL {postgres.split()[0] if postgres else '?'}, RabbitMQ {rabbit}, Redis {redis.strip()} on localhost (shared with other work on this machine)",
        f"Python {sys.version.split()[0]}, {_wrk_version()}",
    ]


def _wrk_version() -> str:
    try:  # wrk prints its version and usage, and exits 1
        text = subprocess.run(["wrk", "--version"], capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.TimeoutExpired):
        return "wrk ?"
    return " ".join(text.split()[:2])


def load_average() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])
