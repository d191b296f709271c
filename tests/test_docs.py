"""The README is the front door and docs/ the rest: the module map names every module, links lead
somewhere, commands run from a fresh clone, and what the docs say of the API the schema says too."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, cast

import pytest
import yaml
from django.test import Client

from .helpers import ROOT

DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def module_map() -> dict[str, set[str]]:
    """docs/architecture.md's module map: folder -> the modules listed under its heading."""
    text = (ROOT / "docs" / "architecture.md").read_text()
    folders: dict[str, set[str]] = {}
    folder = None
    for line in text.splitlines():
        heading = re.match(r"^### `(notifications/[\w/]*)`$", line)
        if heading:
            folder = heading.group(1).rstrip("/")
            folders[folder] = set()
        elif line.startswith("## "):
            folder = None
        elif folder and (item := re.match(r"^- `(\w+\.py)`: \S", line)):
            folders[folder].add(item.group(1))
    return folders


def modules_on_disk() -> dict[str, set[str]]:
    folders: dict[str, set[str]] = {}
    for path in sorted((ROOT / "notifications").rglob("*.py")):
        relative = path.parent.relative_to(ROOT)
        if "migrations" in relative.parts:
            continue
        modules = folders.setdefault(str(relative), set())
        if path.name != "__init__.py":
            modules.add(path.name)
    return folders


def test_every_module_under_notifications_is_in_the_architecture_map_and_nothing_else() -> None:
    documented, on_disk = module_map(), modules_on_disk()
    missing = sorted(f"{folder}/{name}" for folder, names in on_disk.items() for name in names - documented.get(folder, set()))
    gone = sorted(f"{folder}/{name}" for folder, names in documented.items() for name in names - on_disk.get(folder, set()))
    assert not missing, f"docs/architecture.md's module map lacks {missing}"
    assert not gone, f"docs/architecture.md's module map lists modules that do not exist: {gone}"
    assert set(documented) == set(on_disk), "a folder's heading is missing from the module map, or names no folder"


def test_the_readme_is_a_front_door_that_leads_to_every_doc() -> None:
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) <= 250
    assert "make run" in readme and "make test" in readme and "curl" in readme
    for page in ("api", "operations", "architecture", "performance", "observability"):
        assert f"](docs/{page}.md)" in readme, f"the README does not link docs/{page}.md"


def _anchors(text: str) -> set[str]:
    """GitHub's anchors of a page's headings."""
    return {
        re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-") for heading in re.findall(r"^#+ (.+)$", text, re.M)
    }


@pytest.mark.parametrize("page", DOCS, ids=lambda page: page.name)
def test_every_link_of_the_docs_leads_to_a_file_and_heading_that_exist(page: Path) -> None:
    text = page.read_text()
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        if re.match(r"^[a-z]+:", target):
            continue
        path, _, anchor = target.partition("#")
        linked = (page.parent / path).resolve() if path else page
        assert linked.exists(), f"{page.name} links {target}, which does not exist"
        if anchor:
            assert anchor in _anchors(linked.read_text()), f"{page.name} links {target}: no such heading"


@pytest.mark.parametrize("page", DOCS, ids=lambda page: page.name)
def test_the_docs_run_manage_py_with_the_venvs_python(page: Path) -> None:
    # A fresh clone has no active venv: `python manage.py` fails until one is, `.venv/bin/python` works.
    bare = re.findall(r"(?<!\.venv/bin/)\bpython3? manage\.py", page.read_text())
    assert not bare, f"{page.name}: write .venv/bin/python manage.py"


def test_the_api_docs_and_the_schema_agree_that_a_racing_request_is_never_a_409() -> None:
    response = Client().get("/api/schema/")
    schema = cast(dict[str, Any], yaml.safe_load(response.content))
    conflict = schema["paths"]["/api/v1/notifications"]["post"]["responses"]["409"]["description"]
    assert conflict.startswith("Never for a request racing another with the same Idempotency-Key")
    api = (ROOT / "docs" / "api.md").read_text()
    assert "never a 409 for such a race" in api and "409 `idempotency_key_in_flight` only for a key stored" in api
