"""The hard backstop under template work: a job (template_render) runs in a small pool of
processes with OS limits (RLIMIT_AS, RLIMIT_CPU, a wall timeout), killed and replaced past them,
the job failing as ``render_limit``; or in this process when TEMPLATE_SANDBOX_PROCESSES is 0.
The cooperative budget stops what it knows of; this stops what it does not (issue #36)."""

from __future__ import annotations

import collections
import contextlib
import json
import logging
import math
import os
import resource
import select
import signal
import subprocess
import sys
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from ...conf import get_config
from ...errors import NotificationError, RenderLimitExceeded, TemplateRenderFailed, ValidationFailed
from .template_render import TemplateJob, template_job_from_json, template_job_json

logger = logging.getLogger(__name__)

# A sandbox process exits with this when an allocation failed (past RLIMIT_AS): its heap may be
# half-built, so it is replaced rather than trusted with the next job.
_MEMORY_EXIT = 70
# Where ``notifications`` and the Django project import from: the sandbox's ``python -c`` runs there.
_IMPORT_ROOT = Path(__file__).resolve().parents[3]
# How long a new process may take to set Django up and say it is ready (a loaded machine).
_START_SECONDS = 60.0
# A render that waited twice the wall timeout for a sandbox process is refused with this.
_BUSY = "the template sandbox is busy with this client's renders; try again shortly"
_ERRORS: dict[str, type[NotificationError]] = {
    error.__name__: error for error in (ValidationFailed, TemplateRenderFailed, RenderLimitExceeded)
}


def template_job_run(job: TemplateJob, *, owner: str) -> list[str]:
    """What ``job`` returns (a render's parts; nothing for a check), run in the sandbox when it is
    on; its domain errors raised here as they were there. ``owner`` (``client:<id>``, or
    ``platform``): whose template it is, so that one client's slow renders never hold every
    process of the pool (RenderSandbox)."""
    config = get_config()
    if config.template_sandbox_processes == 0:
        try:
            return job.run()
        except MemoryError:
            raise RenderLimitExceeded("the template's render ran out of memory", extra={"field": "template"}) from None
    limits = SandboxLimits(
        processes=config.template_sandbox_processes,
        memory_bytes=config.template_sandbox_memory_bytes,
        cpu_seconds=config.template_sandbox_cpu_seconds,
    )
    return _sandbox(limits).run(job, owner=owner)


@dataclass(frozen=True)
class SandboxLimits:
    processes: int
    memory_bytes: int
    cpu_seconds: int

    @property
    def wall_seconds(self) -> float:
        # The CPU limit is the bound on work; the wall timeout catches a process that stopped
        # without using CPU. Twice the CPU limit and a second: two processes can share one core.
        return 2.0 * self.cpu_seconds + 1.0


class _SandboxProcess:
    """One process of the pool: a fresh interpreter (``python -c``, not a fork of this threaded
    process, and not multiprocessing's start methods, which run the parent's main module again in
    the child), speaking length-prefixed JSON on its stdin and stdout."""

    def __init__(self, limits: SandboxLimits):
        self.process = subprocess.Popen(
            [sys.executable, "-c", _SANDBOX_COMMAND, json.dumps(asdict(limits))],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            cwd=_IMPORT_ROOT,
        )
        try:
            ready = self._receive(_START_SECONDS)
        except EOFError:
            ready = None
        if ready is None:
            self.kill()
            raise RuntimeError(
                f"a template sandbox process did not start within {_START_SECONDS:g} s (exit code {self.process.returncode}; "
                "its error is in this process's stderr)"
            )

    def run(self, job: TemplateJob, *, limits: SandboxLimits) -> dict[str, Any]:
        """The process's answer; RenderLimitExceeded (the process killed) when it died or ran past
        the wall timeout."""
        try:
            assert self.process.stdin is not None
            self.process.stdin.write(_frame(template_job_json(job)))
            self.process.stdin.flush()
            answer = self._receive(limits.wall_seconds)
            if answer is not None:
                return answer
            cause = f"took longer than {limits.wall_seconds:g} s"
        except (EOFError, OSError):
            cause = self._death_cause(limits)
        except BaseException:
            # Anything else (data that is not JSON): the process may hold half a frame; not reused.
            self.kill()
            raise
        self.kill()
        raise RenderLimitExceeded(f"the template's render was stopped: it {cause}", extra={"field": "template"})

    def _receive(self, seconds: float) -> dict[str, Any] | None:
        """The next frame, None when none came within ``seconds``; EOFError when the process ended."""
        assert self.process.stdout is not None
        deadline = time.monotonic() + seconds
        header = self._read(4, deadline)
        if header is None:
            return None
        body = self._read(int.from_bytes(header, "big"), deadline)
        return None if body is None else json.loads(body)

    def _read(self, size: int, deadline: float) -> bytes | None:
        assert self.process.stdout is not None
        fd = self.process.stdout.fileno()
        chunks = bytearray()
        while len(chunks) < size:
            if not select.select([fd], [], [], max(deadline - time.monotonic(), 0.0))[0]:
                return None
            chunk = os.read(fd, size - len(chunks))
            if not chunk:
                raise EOFError
            chunks += chunk
        return bytes(chunks)

    def _death_cause(self, limits: SandboxLimits) -> str:
        code = self.process.wait(timeout=5)
        if code == _MEMORY_EXIT:
            return f"used more than TEMPLATE_SANDBOX_MEMORY_BYTES ({limits.memory_bytes} bytes)"
        if code == -signal.SIGXCPU:
            return f"used more than TEMPLATE_SANDBOX_CPU_SECONDS ({limits.cpu_seconds} s of CPU)"
        return f"ended its process (exit code {code})"

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait(timeout=5)
        for pipe in (self.process.stdin, self.process.stdout):
            if pipe is not None:
                with contextlib.suppress(OSError):
                    pipe.close()


def _frame(value: Any) -> bytes:
    body = json.dumps(value).encode()
    return len(body).to_bytes(4, "big") + body


class RenderSandbox:
    """At most ``limits.processes`` sandbox processes, started when first needed, each running one
    job at a time for any thread of this process; a thread waits for a free one (every job ends
    within the wall timeout). A process that dies or is killed is replaced by the next job's.

    One owner's jobs hold at most ``per_owner`` processes at once (all but one, when there are
    two or more): a client whose templates each take their whole budget, sent from every thread,
    waits for its own jobs and leaves a process to everyone else's. A thread waits at most twice
    the wall timeout for its turn, then its render is refused (``render_limit``)."""

    def __init__(self, limits: SandboxLimits):
        self.limits = limits
        self.per_owner = max(1, limits.processes - 1)
        self.pid = os.getpid()
        self.started = 0
        self._idle: list[_SandboxProcess] = []
        self._running = 0
        self._owners: collections.Counter[str] = collections.Counter()
        self._free = threading.Condition()

    def run(self, job: TemplateJob, *, owner: str) -> list[str]:
        process = self._take(owner)
        kept = False
        try:
            answer = process.run(job, limits=self.limits)
            kept = True
        finally:
            with self._free:
                if kept:
                    self._idle.append(process)
                else:
                    self._running -= 1
                self._owner_done(owner)
        if "error" in answer:
            error = _ERRORS.get(answer["error"], TemplateRenderFailed)
            raise error(answer["message"], extra=answer["extra"])
        parts: list[str] = answer["parts"]
        return parts

    def _take(self, owner: str) -> _SandboxProcess:
        # A thread waiting for its turn holds a web or worker thread: it waits at most twice the
        # wall timeout. Renders that take their time are a client's own; a burst of quick ones (a
        # client's 50 accepts at once, 0.3 ms a render) waits for milliseconds and is never refused.
        deadline = time.monotonic() + 2 * self.limits.wall_seconds
        with self._free:
            while self._owners[owner] >= self.per_owner or (not self._idle and self._running >= self.limits.processes):
                if not self._free.wait(timeout=max(0.0, deadline - time.monotonic())):
                    raise RenderLimitExceeded(_BUSY, extra={"field": "template"})
            self._owners[owner] += 1
            if self._idle:
                return self._idle.pop()
            self._running += 1
        try:
            process = _SandboxProcess(self.limits)
        except BaseException:
            with self._free:
                self._running -= 1
                self._owner_done(owner)
            raise
        self.started += 1
        return process

    def _owner_done(self, owner: str) -> None:
        """One of ``owner``'s jobs let its process go (the condition's lock held)."""
        self._owners[owner] -= 1
        if not self._owners[owner]:
            del self._owners[owner]
        # Every waiter looks again: the one this frees may be waiting for its owner's turn.
        self._free.notify_all()

    def busy_owners(self) -> dict[str, int]:
        """How many processes each owner's jobs hold now."""
        with self._free:
            return dict(self._owners)

    def idle_pids(self) -> list[int]:
        with self._free:
            return [process.process.pid for process in self._idle]

    def close(self) -> None:
        with self._free:
            idle, self._idle = self._idle, []
            self._running -= len(idle)
        for process in idle:
            process.kill()


_SANDBOX: RenderSandbox | None = None
_SANDBOX_LOCK = threading.Lock()


def _sandbox(limits: SandboxLimits) -> RenderSandbox:
    """This process's pool: made again when the limits change (a test's override), or in a child
    forked after it was made (gunicorn's and rundramatiq's workers), whose pipes are the parent's."""
    global _SANDBOX
    with _SANDBOX_LOCK:
        if _SANDBOX is None or _SANDBOX.limits != limits or _SANDBOX.pid != os.getpid():
            if _SANDBOX is not None and _SANDBOX.pid == os.getpid():
                _SANDBOX.close()
            _SANDBOX = RenderSandbox(limits)
        return _SANDBOX


def current_sandbox() -> RenderSandbox | None:
    """This process's pool, if one was made (for tests and the bench)."""
    return _SANDBOX


# --- In the sandbox process ---------------------------------------------------------------------


_SANDBOX_COMMAND = (
    "import django; django.setup(); from notifications.services.policy.render_sandbox import sandbox_process_main; "
    "sandbox_process_main()"
)


def sandbox_process_main() -> None:
    """A sandbox process (run by _SANDBOX_COMMAND after Django's setup, with DJANGO_SETTINGS_MODULE
    and the environment of its parent): no database, its limits set, then one job at a time from
    stdin, each answered on stdout, until the parent closes stdin (or dies)."""
    from django.db import connections

    limits = SandboxLimits(**json.loads(sys.argv[1]))
    # Frames only on the real stdout; anything printed (a log handler on stdout) goes to stderr.
    answers = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    jobs = sys.stdin.buffer
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    # The limit is on what a job may add: the process's own address space after Django's start.
    _, hard = resource.getrlimit(resource.RLIMIT_AS)
    resource.setrlimit(resource.RLIMIT_AS, (_address_space_bytes() + limits.memory_bytes, hard))
    with contextlib.ExitStack() as stack:
        for alias in connections:
            stack.enter_context(connections[alias].execute_wrapper(_no_database))
        answers.write(_frame("ready"))
        answers.flush()
        while True:
            header = jobs.read(4)
            if len(header) < 4:
                return
            message = jobs.read(int.from_bytes(header, "big"))
            _cpu_limit_from_now(limits.cpu_seconds)
            try:
                answer: dict[str, Any] = {"parts": template_job_from_json(json.loads(message)).run()}
            except MemoryError:
                os._exit(_MEMORY_EXIT)
            except NotificationError as error:
                answer = {"error": type(error).__name__, "message": error.message, "extra": error.extra}
            answers.write(_frame(answer))
            answers.flush()


def _cpu_limit_from_now(seconds: int) -> None:
    """RLIMIT_CPU counts the process's whole life, so each job's limit is what it used so far plus
    ``seconds`` (whole seconds: the kernel's unit); past it the kernel sends SIGXCPU, which kills."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    _, hard = resource.getrlimit(resource.RLIMIT_CPU)
    soft = math.ceil(usage.ru_utime + usage.ru_stime) + seconds
    resource.setrlimit(resource.RLIMIT_CPU, (soft if hard == resource.RLIM_INFINITY else min(soft, hard), hard))


def _address_space_bytes() -> int:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[0]) * resource.getpagesize()


def _no_database(*args: Any) -> Any:
    raise RuntimeError("a template sandbox process never touches the database")
