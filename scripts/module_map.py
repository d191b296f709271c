"""Bring docs/architecture.md's module map in line with the code: every folder under
notifications/ (migrations aside) and every module in it, in order; a line already written is kept,
a new folder or module gets its docstring's first paragraph, one gone is dropped.
`tests/test_docs.py` fails when the map and the code disagree.

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
MARKER = "\nOutside `notifications/`"  # the paragraph after the map
INTRO = (
    "Every module under `notifications/` (migrations aside), by folder, with the first line of its\n"
    "docstring; `tests/test_docs.py` fails when a module is missing here or listed but gone\n"
    "(`.venv/bin/python scripts/module_map.py` writes this section from the code).\n"
)


def _docstring(path: Path) -> str:
    return ast.get_docstring(ast.parse(path.read_text())) or ""


def _existing(text: str) -> tuple[dict[str, str], dict[str, str]]:
    """The map as written: folder -> its paragraph, and "folder/module.py" -> its line (kept, so a
    line someone wrote better than the docstring stays)."""
    paragraphs: dict[str, str] = {}
    lines: dict[str, str] = {}
    folder = ""
    for line in text.splitlines():
        if line.startswith("### `notifications"):
            folder = line.split("`")[1].rstrip("/")
        elif folder and line.startswith("- `"):
            lines[f"{folder}/{line.split('`')[1]}"] = line
        elif folder and line.strip() and not line.startswith("#"):
            paragraphs.setdefault(folder, line)
    return paragraphs, lines


def section(text: str) -> str:
    paragraphs, written = _existing(text.split(START, 1)[1].split(MARKER, 1)[0])
    lines = [START, "\n", INTRO]
    folders = sorted(
        {p.parent for p in (ROOT / "notifications").rglob("*.py") if "migrations" not in p.relative_to(ROOT).parts}
    )
    for folder in folders:
        name = str(folder.relative_to(ROOT))
        lines += ["\n", f"### `{name}/`\n", "\n"]
        init = folder / "__init__.py"
        paragraph = paragraphs.get(name) or (" ".join(_docstring(init).split("\n\n")[0].split()) if init.exists() else "")
        if paragraph:
            lines += [paragraph + "\n", "\n"]
        for module in sorted(p for p in folder.glob("*.py") if p.name != "__init__.py"):
            first = " ".join(_docstring(module).split("\n\n")[0].split()) or "(no docstring)"
            lines.append(written.get(f"{name}/{module.name}", f"- `{module.name}`: {first}") + "\n")
    return "".join(lines)


def rewritten(text: str) -> str:
    head, rest = text.split(START, 1)
    tail = rest[rest.index(MARKER) :] if MARKER in rest else ""
    return head + section(text) + tail


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
