"""Every option the platform reads from the environment, declared once: its variable, type,
default, bounds and line of doc. platform/settings.py reads the environment through these,
conf.py types and checks the app's, and `manage.py options_reference` writes the docs' table and
.env.example from them. This package imports nothing of Django's apps: settings import it.

Adding an option: one ``Option(...)`` in ``app.py`` (read through ``conf.get_config()``, a field of
its lower-case name) or ``platform.py`` (a Django setting), then `manage.py options_reference`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from .app import APP_OPTIONS
from .option import Option, group
from .platform import GUNICORN_OPTIONS, PLATFORM_OPTIONS

# In the order of the docs' table and of .env.example.
OPTIONS: tuple[Option, ...] = (*PLATFORM_OPTIONS, *APP_OPTIONS, *GUNICORN_OPTIONS)
APP_OPTIONS_BY_NAME: dict[str, Option] = {option.name: option for option in APP_OPTIONS}

__all__ = [
    "APP_OPTIONS",
    "APP_OPTIONS_BY_NAME",
    "GUNICORN_OPTIONS",
    "OPTIONS",
    "PLATFORM_OPTIONS",
    "Option",
    "group",
    "options_in_groups",
    "read_app_options",
    "read_platform_options",
]

# Reads one variable's text, None when unset (platform/settings.py passes django-environ's reader,
# which also sees .env).
EnvironmentReader = Callable[[str], "str | None"]


def read_platform_options(read: EnvironmentReader) -> dict[str, Any]:
    """The project's options, typed and checked, by variable: what platform/settings.py sets
    Django's settings from. Raises ImproperlyConfigured naming the first bad variable."""
    return {option.env: option.parse(read(option.env)) for option in PLATFORM_OPTIONS}


def read_app_options(read: EnvironmentReader) -> dict[str, str | None]:
    """``settings.NOTIFICATIONS``: the app's options as the environment gives them (None when
    unset), by name; conf.get_config() types and checks them, overrides included."""
    return {option.name: read(option.env) for option in APP_OPTIONS}


def options_in_groups(options: Iterable[Option] = OPTIONS) -> list[tuple[str, list[Option]]]:
    """The options by group, groups in the order they first appear."""
    groups: dict[str, list[Option]] = {}
    for option in options:
        groups.setdefault(option.group, []).append(option)
    return list(groups.items())
