"""Every command the suite runs that `make install` does not bring, and the script that makes sure
it is on the machine before a test calls it (scripts/test.sh runs each, before pytest).

A guard keeps it so. Every process a test starts is seen (Python's ``subprocess.Popen`` audit
event): the fast tier may start nothing but this venv's Python and its scripts, and the full suite
nothing that is not named here. A test that needs one of these commands says so with
``@pytest.mark.tool("name")`` (``browser`` implies ``chromium``), which keeps it out of the fast
tier. A green run on a machine where a session once installed a tool by hand therefore proves
nothing about a fresh one only if this table lies; tests/test_external_tools.py checks the table
against the scripts.
"""

from __future__ import annotations

import os
import shutil
import sys
import threading
from collections.abc import Iterable
from pathlib import Path

# command -> the script scripts/test.sh runs before pytest that installs it, or starts its service
# and fails loudly when it is missing.
EXTERNAL_TOOLS: dict[str, str] = {
    "promtool": "scripts/promtool.sh",  # Debian's prometheus package: the alert-rule tests
    "chromium": "scripts/browser.sh",  # Debian's chromium, driven by Playwright: the browser tests
    # The machine's services and their clients: the fault tests start their own nodes with them.
    "pg_isready": "scripts/services.sh",
    "pg_ctlcluster": "scripts/services.sh",
    "redis-cli": "scripts/services.sh",
    "redis-server": "scripts/services.sh",
    "rabbitmqctl": "scripts/services.sh",
    "rabbitmq-server": "scripts/services.sh",
}

# Commands of the base system (Debian's essential packages) that the standard library itself runs:
# on every machine, so no script installs them.
BASE_COMMANDS: dict[str, str] = {
    "uname": "coreutils: the standard library's platform.processor() runs `uname -p`",
}

VENV = Path(sys.prefix)


def _command_path(executable: object, args: object) -> str:
    """The program a ``subprocess.Popen`` audit event starts, as a path when it can be found."""
    program = executable
    if program is None:
        program = args if isinstance(args, (str, bytes)) else next(iter(args), "") if isinstance(args, Iterable) else ""
    program = os.fsdecode(program) if isinstance(program, (str, bytes, os.PathLike)) else str(program)
    if os.sep in program:
        return program
    return shutil.which(program) or program


def is_this_python(path: str) -> bool:
    """This venv's interpreter, or any program inside the venv (its scripts, Playwright's driver):
    what `make install` brings."""
    # normpath: a path through ``..`` out of the venv is not in it.
    if Path(os.path.normpath(path)).is_relative_to(VENV):
        return True
    return os.path.realpath(path) == os.path.realpath(sys.executable)


def tool_name(path: str) -> str:
    return Path(path).name


class StartedCommands:
    """The programs started in this process since the last ``take()``, from the audit hook."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._paths: list[str] = []

    def hook(self, event: str, args: tuple[object, ...]) -> None:
        # Every way Python starts a program: subprocess, os.system (its shell), os.posix_spawn*,
        # os.exec* and os.spawn* (the programs a started program starts are its own business).
        if event == "subprocess.Popen":
            path = _command_path(args[0], args[1])
        elif event == "os.system":
            path = "/bin/sh"
        elif event in ("os.posix_spawn", "os.exec"):
            path = _command_path(args[0], None)
        elif event == "os.spawn":
            path = _command_path(args[1], None)
        else:
            return
        with self._lock:
            self._paths.append(path)

    def take(self) -> list[str]:
        with self._lock:
            paths, self._paths = self._paths, []
        return paths


def refused(paths: Iterable[str], *, fast_tier: bool, declared: set[str]) -> list[str]:
    """Why each of ``paths`` should not have been started by a test that declared ``declared``."""
    problems = []
    for path in paths:
        if is_this_python(path) or tool_name(path) in BASE_COMMANDS:
            continue
        name = tool_name(path)
        if fast_tier:
            problems.append(f"{path}: the fast tier may start only this venv's Python (mark the test tool({name!r}))")
        elif name not in EXTERNAL_TOOLS:
            problems.append(f"{path}: not in tests/external_tools.py EXTERNAL_TOOLS, so nothing installs it before the suite")
        elif EXTERNAL_TOOLS[name] != "scripts/services.sh" and name not in declared:
            problems.append(f"{path}: the test does not declare @pytest.mark.tool({name!r})")
    return problems


started_commands = StartedCommands()
# An audit hook cannot be removed: one for the life of the process, installed when tests/ is imported.
sys.addaudithook(started_commands.hook)
