"""Every command the suite runs is installed by a script `make test` runs first, and the fast tier
runs nothing but Python (tests/external_tools.py): a tool a session once installed by hand cannot
make a fresh machine's `make test` fail where CI passed."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

from .external_tools import BASE_COMMANDS, EXTERNAL_TOOLS, refused, started_commands
from .helpers import ROOT

TEST_SH = ROOT / "scripts" / "test.sh"
RUNS_COMMAND = {"run", "Popen", "call", "check_call", "check_output"}


def _literal_commands(tree: ast.AST) -> set[str]:
    """Programs named literally in a module: the first word of a subprocess call's argument list
    (or of a list assigned to a ``command`` name), shutil.which's argument, and absolute paths into
    the system's program folders."""
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.args:
            first = node.args[0]
            if node.func.attr in RUNS_COMMAND and isinstance(first, (ast.List, ast.Tuple)) and first.elts:
                first = first.elts[0]
            if node.func.attr in RUNS_COMMAND | {"which"} and isinstance(first, ast.Constant) and isinstance(first.value, str):
                found.add(Path(first.value).name)
        elif isinstance(node, ast.Assign) and isinstance(node.value, ast.List) and node.value.elts:
            # command = ["redis-server", ...] then subprocess.Popen(command)
            first = node.value.elts[0]
            named = any(isinstance(target, ast.Name) and "command" in target.id for target in node.targets)
            if named and isinstance(first, ast.Constant) and isinstance(first.value, str):
                found.add(Path(first.value).name)
        elif (
            isinstance(node, ast.Constant)
            and isinstance(node.value, str)
            and re.fullmatch(r"/usr/(s?bin|lib/[\w.-]+/bin)/[\w.+-]+", node.value)
        ):
            found.add(Path(node.value).name)
    return found


def test_every_command_named_in_the_tests_is_one_a_script_installs_first() -> None:
    named: dict[str, str] = {}
    # This module starts `true` on purpose, to see the guard refuse it.
    for module in sorted(set((ROOT / "tests").rglob("*.py")) - {Path(__file__)}):
        for command in _literal_commands(ast.parse(module.read_text())):
            named.setdefault(command, module.name)
    assert {"promtool", "chromium", "redis-server", "rabbitmqctl"} <= set(named)  # the scan sees them
    unknown = {command: module for command, module in named.items() if command not in EXTERNAL_TOOLS | BASE_COMMANDS}
    assert unknown == {}, "add each to tests/external_tools.py with the script that installs it"


def test_each_installing_script_runs_in_test_sh_before_pytest_and_names_its_command() -> None:
    steps = TEST_SH.read_text()
    pytest_at = steps.index("-m pytest")
    for command, script in EXTERNAL_TOOLS.items():
        assert (ROOT / script).is_file(), script
        name = Path(script).name
        assert re.search(rf"^scripts/{re.escape(name)}\b", steps[:pytest_at], re.MULTILINE), f"test.sh does not run {script}"
        assert command in (ROOT / script).read_text(), f"{script} does not install or check {command}"


def test_make_test_runs_the_fast_tier_with_only_the_venv_and_the_base_system_on_path() -> None:
    recipe = (ROOT / "Makefile").read_text().split("\ntest:", 1)[1].split("\n\n", 1)[0]
    assert 'PATH="$(CURDIR)/$(VENV)/bin:/usr/bin:/bin" scripts/test-fast.sh' in recipe
    assert recipe.index("scripts/test-fast.sh") < recipe.index("scripts/test.sh")


def test_a_command_outside_the_venv_is_refused_in_the_fast_tier_and_unknown_ones_everywhere() -> None:
    subprocess.run(["true"], check=True)
    subprocess.run([sys.executable, "-c", "pass"], check=True)
    true, python = started_commands.take()  # taken here, so this test's own guard does not see them
    assert Path(true).name == "true"
    assert refused([python], fast_tier=True, declared=set()) == []
    driver = Path(sys.prefix) / "lib" / "python3.11" / "site-packages" / "playwright" / "driver" / "node"
    assert refused([str(driver)], fast_tier=True, declared=set()) == []  # in the venv: make install brings it
    assert refused([f"{sys.prefix}/../../usr/bin/promtool"], fast_tier=True, declared=set()) != []  # out of it
    assert refused([true], fast_tier=True, declared=set()) == [
        f"{true}: the fast tier may start only this venv's Python (mark the test tool('true'))"
    ]
    assert refused([true], fast_tier=False, declared={"true"}) == [
        f"{true}: not in tests/external_tools.py EXTERNAL_TOOLS, so nothing installs it before the suite"
    ]
    assert refused(["/usr/bin/promtool"], fast_tier=False, declared={"promtool"}) == []
    assert refused(["/usr/bin/promtool"], fast_tier=False, declared=set()) == [
        "/usr/bin/promtool: the test does not declare @pytest.mark.tool('promtool')"
    ]
    assert refused(["/usr/bin/redis-cli"], fast_tier=False, declared=set()) == []  # the services every test may use
