"""CPU time (user + system) of process trees, read from /proc, for the bench's cost-per-message figures.

A tree's time is, over every live process in it, its own utime + stime plus its cutime + cstime
(the time of children it has already waited for), so processes that came and went inside the tree
are counted once they were reaped. The services are measured as whole servers: PostgreSQL as its
postmaster's tree (every backend, including the ones that ended: the postmaster reaps them, and
WAL writer, checkpointer, autovacuum), RabbitMQ as its beam.smp, Redis as redis-server. On a
server other people use at the same time their work counts too: measure on a quiet machine.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

TICKS = os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True)
class _Proc:
    ppid: int
    comm: str
    cpu: float  # seconds: utime + stime + cutime + cstime


def _processes() -> dict[int, _Proc]:
    found: dict[int, _Proc] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            raw = (entry / "stat").read_text()
        except OSError:  # ended while we looked
            continue
        comm = raw[raw.index("(") + 1 : raw.rindex(")")]
        fields = raw[raw.rindex(")") + 2 :].split()
        # fields[0] is stat field 3 (state): ppid is field 4, utime..cstime are fields 14-17.
        ticks = sum(int(value) for value in fields[11:15])
        found[int(entry.name)] = _Proc(ppid=int(fields[1]), comm=comm, cpu=ticks / TICKS)
    return found


def _tree_cpu(root: int, processes: dict[int, _Proc]) -> float:
    children: dict[int, list[int]] = {}
    for pid, proc in processes.items():
        children.setdefault(proc.ppid, []).append(pid)
    total, stack = 0.0, [root]
    while stack:
        pid = stack.pop()
        if pid in processes:
            total += processes[pid].cpu
            stack.extend(children.get(pid, []))
    return total


SERVICE_PORTS = {"postgresql": 5432, "rabbitmq": 5672, "redis": 6379}


def _listening_inodes(port: int) -> set[str]:
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if fields[3] == "0A" and int(fields[1].rsplit(":", 1)[1], 16) == port:  # 0A: LISTEN
                inodes.add(fields[9])
    return inodes


def service_roots() -> dict[str, int]:
    """The process listening on each local service's port: PostgreSQL's postmaster, RabbitMQ's
    beam.smp, redis-server (found by port, so a second RabbitMQ that a test started elsewhere is
    not taken for the one the bench uses)."""
    wanted = {f"socket:[{inode}]": name for name, port in SERVICE_PORTS.items() for inode in _listening_inodes(port)}
    roots: dict[str, int] = {}
    # Lowest pid first: a child that inherited the listening socket comes after its parent.
    for entry in sorted((e for e in Path("/proc").iterdir() if e.name.isdigit()), key=lambda e: int(e.name)):
        try:
            targets = [os.readlink(fd) for fd in (entry / "fd").iterdir()]
        except OSError:
            continue
        for target in targets:
            if target in wanted:
                roots.setdefault(wanted[target], int(entry.name))
    return roots


class CpuMeter:
    """CPU seconds spent by some process trees (and the local services) between start() and read()."""

    def __init__(self, **trees: int) -> None:
        self.roots = {**trees, **service_roots()}
        self._start: dict[str, float] = {}

    def _now(self) -> dict[str, float]:
        processes = _processes()
        return {name: _tree_cpu(root, processes) for name, root in self.roots.items()}

    def start(self) -> None:
        self._start = self._now()

    def read(self) -> dict[str, float]:
        now = self._now()
        return {name: now[name] - self._start.get(name, 0.0) for name in self.roots}


def tree_cpu(root: int) -> float:
    return _tree_cpu(root, _processes())


def children_of(root: int) -> list[int]:
    return sorted(pid for pid, proc in _processes().items() if proc.ppid == root)


def busiest_child(root: int) -> int | None:
    """The child of ``root`` with the most CPU so far (a worker process under load)."""
    processes = _processes()
    kids = [pid for pid, proc in processes.items() if proc.ppid == root]
    return max(kids, key=lambda pid: processes[pid].cpu, default=None)
