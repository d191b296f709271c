"""`make lint`'s size check: no module over 400 lines (migrations aside) and no package folder
holding more than 20 modules directly (its __init__.py aside), under the given folders.

A module past the limit holds two capabilities, and a folder past it has outgrown its plan: split
the one, group the other into subpackages (docs/architecture.md names each module)."""

from __future__ import annotations

import sys
from pathlib import Path

MAX_MODULE_LINES = 400
MAX_PACKAGE_MODULES = 20


def house_problems(roots: list[Path]) -> list[str]:
    problems: list[str] = []
    for root in roots:
        for module in sorted(root.rglob("*.py")):
            if "migrations" in module.parts:
                continue
            lines = len(module.read_text(encoding="utf-8").splitlines())
            if lines > MAX_MODULE_LINES:
                problems.append(f"{module}: {lines} lines, over {MAX_MODULE_LINES}; split it by capability")
        for package in sorted({init.parent for init in root.rglob("__init__.py")}):
            if "migrations" in package.parts:
                continue
            modules = [path for path in package.glob("*.py") if path.name != "__init__.py"]
            if len(modules) > MAX_PACKAGE_MODULES:
                problems.append(
                    f"{package}/: {len(modules)} modules directly, over {MAX_PACKAGE_MODULES}; group them into subpackages"
                )
    return problems


def main(argv: list[str]) -> int:
    problems = house_problems([Path(arg) for arg in argv] or [Path("notifications"), Path("platform")])
    for problem in problems:
        print(problem, file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
