"""Write docs/architecture.md's module map from the code: every folder under notifications/
(migrations aside) with its package docstring's first paragraph, and every module with the first
line of its docstring. `tests/test_docs.py` fails when the map and the code disagree.

    .venv/bin/python scripts/module_map.py          # rewrite the section
    .venv/bin/python scripts/module_map.py --check  # exit 1 when it would change
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "architecture.md"
START = "## Module map\n"
INTRO = (
    "Every module under `notifications/` (migrations aside), by folder, with the first line of its\n"
    "docstring; `tests/test_docs.py` fails when a module is missing here or listed but gone\n"
    "(`.venv/bin/python scripts/module_map.py` writes this section from the code).\n"
)


def _docstring(path: Path) -> str:
    return ast.get_docstring(ast.parse(path.read_text())) or ""


def section() -> str:
    lines = [START, "\n", INTRO]
    folders = sorted(
        {p.parent for p in (ROOT / "notifications").rglob("*.py") if "migrations" not in p.relative_to(ROOT).parts}
    )
    for folder in folders:
        lines += ["\n", f"### `{folder.relative_to(ROOT)}/`\n", "\n"]
        package_doc = _docstring(folder / "__init__.py").split("\n\n")[0] if (folder / "__init__.py").exists() else ""
        if package_doc:
            lines += [" ".join(package_doc.split()) + "\n", "\n"]
        for module in sorted(p for p in folder.glob("*.py") if p.name != "__init__.py"):
            first = " ".join(_docstring(module).split("\n\n")[0].split()) or "(no docstring)"
            lines.append(f"- `{module.name}`: {first}\n")
    return "".join(lines)


def rewritten(text: str) -> str:
    head, rest = text.split(START, 1)
    tail = rest[rest.index("\nOutside `notifications/`") :] if "\nOutside `notifications/`" in rest else ""
    return head + section() + tail


def main() -> int:
    text = DOC.read_text()
    new = rewritten(text)
    if "--check" in sys.argv:
        if new != text:
            print("docs/architecture.md's module map is out of date: run .venv/bin/python scripts/module_map.py")
            return 1
        return 0
    DOC.write_text(new)
    print("wrote the module map of docs/architecture.md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
