"""The options as an operator reads them: the environment table of docs/operations.md and
.env.example, both written from the declarations (`manage.py options_reference`) and checked
against them by tests/test_settings_documented.py."""

from __future__ import annotations

from pathlib import Path

from . import options_in_groups
from .option import Option

DOCS_PATH = Path("docs") / "operations.md"
ENV_EXAMPLE_PATH = Path(".env.example")
COMMAND = "`.venv/bin/python manage.py options_reference`"
TABLE_BEGIN = f"<!-- options: written by {COMMAND} from notifications/options/; edit there -->"
TABLE_END = "<!-- options: end -->"


def default_text(option: Option) -> str:
    """The default as the variable would be set to it."""
    value = option.default
    if option.kind is bool:
        return str(value).lower()
    if option.kind is tuple:
        return ",".join(value)
    if option.kind is float:
        return f"{value:g}"
    return str(value)


def shown_default(option: Option) -> str:
    """The default as the table shows it (markdown)."""
    if option.shown_default is not None:
        return option.shown_default
    text = default_text(option)
    return f"`{text}`" if text else ("none" if option.kind is tuple else "unset")


def _bound(value: float) -> str:
    """A bound as written: a whole number in full (16777216, not 1.67772e+07)."""
    return str(int(value)) if float(value).is_integer() else f"{value:g}"


def allowed_values(option: Option) -> str:
    if option.kind is bool:
        return "`true` or `false`"
    if option.kind in (int, float):
        noun = "whole number" if option.kind is int else "number"
        if option.minimum is not None and option.maximum is not None:
            return f"{noun}, {_bound(option.minimum)} to {_bound(option.maximum)}"
        if option.minimum is not None:
            return f"{noun} ≥ {_bound(option.minimum)}"
        return noun
    if option.kind is tuple:
        return "comma-separated"
    text = option.form or "text"
    return f"{text}; secret" if option.secret else text


def environment_table() -> str:
    """One table per group, between the markers docs/operations.md keeps it in."""
    parts = [TABLE_BEGIN, ""]
    for title, options in options_in_groups():
        parts += [f"#### {title}", "", "| variable | default | value | meaning |", "|---|---|---|---|"]
        parts += [
            f"| `{option.env}` | {shown_default(option)} | {allowed_values(option)} | {option.doc} |".replace("\n", " ")
            for option in options
        ]
        parts.append("")
    parts.append(TABLE_END)
    return "\n".join(parts)


def docs_with_table(text: str) -> str:
    """``text`` (docs/operations.md) with the table between its markers written anew."""
    before, begin, rest = text.partition(TABLE_BEGIN)
    _, end, after = rest.partition(TABLE_END)
    if not begin or not end:
        raise ValueError(f"{DOCS_PATH} has lost the markers of the options table ({TABLE_BEGIN} ... {TABLE_END})")
    return before + environment_table() + after


def _plain(text: str) -> str:
    return text.replace("`", "")


def env_example() -> str:
    lines = [
        f"# Written by {_plain(COMMAND)} from notifications/options/: edit there, not here.",
        "# Copy to .env (platform/settings.py reads it; real environment variables win) or export these.",
        "# Uncommented: this machine's PostgreSQL, RabbitMQ and Redis (run",
        "# `createdb -h 127.0.0.1 -U postgres notifications` first); delete those three lines for the",
        "# embedded default (SQLite, in-process broker, local memory). Commented: the default, to change.",
        "# For production start from deploy/production.env.example instead.",
    ]
    for title, options in options_in_groups():
        lines += ["", f"# --- {_plain(title)} ---"]
        for option in options:
            note = f" (default: {_plain(option.shown_default)})" if option.shown_default is not None else ""
            lines.append(f"# {_plain(option.doc)}{note}")
            if option.example is not None:
                lines.append(f"{option.env}={option.example}")
            elif option.secret or option.shown_default is not None:
                lines.append(f"# {option.env}=")
            else:
                lines.append(f"# {option.env}={default_text(option)}")
    return "\n".join(lines) + "\n"


def stale_references(root: Path) -> list[Path]:
    """The generated files under ``root`` that differ from what the options say now."""
    stale = []
    docs = root / DOCS_PATH
    if docs_with_table(docs.read_text()) != docs.read_text():
        stale.append(DOCS_PATH)
    example = root / ENV_EXAMPLE_PATH
    if not example.exists() or example.read_text() != env_example():
        stale.append(ENV_EXAMPLE_PATH)
    return stale


def write_references(root: Path) -> list[Path]:
    """Write the stale ones anew; returns what was written."""
    stale = stale_references(root)
    for path in stale:
        if path == DOCS_PATH:
            (root / path).write_text(docs_with_table((root / path).read_text()))
        else:
            (root / path).write_text(env_example())
    return stale
