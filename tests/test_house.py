"""`make lint`'s size check (scripts/check_house.py): the code as it is passes, and a module too long
or a folder too full is refused. (tests/test_docs.py keeps docs/architecture.md's module map.)"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
APP = ROOT / "notifications"

sys.path.insert(0, str(ROOT / "scripts"))
from check_house import MAX_MODULE_LINES, MAX_PACKAGE_MODULES, house_problems  # noqa: E402


def test_the_house_check_passes_on_the_code_as_it_is() -> None:
    assert house_problems([APP, ROOT / "platform"]) == []


def test_the_house_check_refuses_a_long_module_and_a_full_folder_but_not_migrations(tmp_path: Path) -> None:
    package = tmp_path / "app"
    (package / "migrations").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "migrations" / "__init__.py").write_text("")
    (package / "long.py").write_text("x = 1\n" * (MAX_MODULE_LINES + 1))
    (package / "migrations" / "0001_initial.py").write_text("x = 1\n" * (MAX_MODULE_LINES + 50))
    for number in range(MAX_PACKAGE_MODULES):  # with long.py, one module too many
        (package / f"module_{number}.py").write_text("")
    for number in range(MAX_PACKAGE_MODULES + 5):
        (package / "migrations" / f"{number:04d}_step.py").write_text("")

    problems = house_problems([package])

    assert len(problems) == 2
    assert problems[0].startswith(f"{package / 'long.py'}: {MAX_MODULE_LINES + 1} lines")
    assert problems[1].startswith(f"{package}/: {MAX_PACKAGE_MODULES + 1} modules directly")
    (package / "module_0.py").unlink()
    (package / "long.py").write_text("x = 1\n" * MAX_MODULE_LINES)
    assert house_problems([package]) == []
