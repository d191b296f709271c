"""One option: its variable, type, default, bounds and line of doc, and how a value of it is read.

A value comes from the environment as text, or from ``settings.NOTIFICATIONS`` (a test's
``override_settings``) already typed; both go through :meth:`Option.parse`, the one place a
value is converted and its bounds checked, so every refusal names the variable the operator sets.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import Any

from django.core.exceptions import ImproperlyConfigured

_TRUE = {"true", "yes", "on", "1"}
_FALSE = {"false", "no", "off", "0"}

# DRF's throttle rate: requests per second, minute, hour or day ("20/min", "5/s").
THROTTLE_RATE = r"[1-9]\d*\s*/\s*(s|sec|second|m|min|minute|h|hour|d|day)"
THROTTLE_RATE_FORM = "N/s, N/min, N/hour or N/day, e.g. '20/min'"


@dataclass(frozen=True)
class Option:
    """``name`` is the key in ``settings.NOTIFICATIONS`` for the app's options (conf.py), the
    variable itself for the project's; ``env`` is the environment variable (``name`` unless given).
    ``kind`` is bool, int, float, str or tuple (a comma-separated list of strings)."""

    name: str
    kind: type
    default: Any
    doc: str
    env: str = ""
    minimum: float | None = None
    maximum: float | None = None
    # A string option's whole value must match ``pattern``; ``form`` says what that is, in an error.
    pattern: str | None = None
    form: str = ""
    # Never shown by value (a password, a token): .env.example leaves it empty.
    secret: bool = False
    # What the docs say the default is when it is made at start-up (a path, the CPU count).
    shown_default: str | None = None
    # The value .env.example sets, uncommented; None: the default, commented out.
    example: str | None = None
    group: str = ""

    def __post_init__(self) -> None:
        if not self.env:
            object.__setattr__(self, "env", self.name)

    def parse(self, value: Any) -> Any:
        """The typed value of ``value`` (text from the environment, or a typed override); None (unset)
        is the default. Empty text is an empty string or list, and no number or true/false: an
        empty ``DEBUG=`` must not quietly mean either. Raises ImproperlyConfigured naming the variable."""
        if value is None:
            return self.default
        if self.kind is bool:
            return self._bool(value)
        if self.kind in (int, float):
            return self._number(value)
        if self.kind is tuple:
            items: Iterable[Any] = value.split(",") if isinstance(value, str) else value
            return tuple(text for text in (str(item).strip() for item in items) if text)
        text = str(value)
        if self.pattern:
            text = text.strip()
            if not re.fullmatch(self.pattern, text):
                raise ImproperlyConfigured(f"{self.env}: {value!r} is not of the form {self.form}")
        return text

    def _bool(self, value: Any) -> bool:
        if isinstance(value, bool):
            return value
        text = str(value).strip().lower()
        if text not in _TRUE | _FALSE:
            raise ImproperlyConfigured(f"{self.env}: {value!r} is not true or false")
        return text in _TRUE

    def _number(self, value: Any) -> int | float:
        try:
            if isinstance(value, bool):
                raise ValueError
            number = float(value) if self.kind is float else _whole(value)
        except (TypeError, ValueError, OverflowError):
            kind = "a number" if self.kind is float else "a whole number"
            raise ImproperlyConfigured(f"{self.env}: {value!r} is not {kind}") from None
        if isinstance(number, float) and not math.isfinite(number):
            raise ImproperlyConfigured(f"{self.env}: {value!r} is not a finite number")
        given = str(value).strip()
        # A retention of 0 days would purge every finished row; a zero timeout would take back
        # sends still in flight: each bound is where the option stops making sense.
        if self.minimum is not None and number < self.minimum:
            raise ImproperlyConfigured(f"{self.env} must be at least {self.minimum:g}, got {given}")
        if self.maximum is not None and number > self.maximum:
            raise ImproperlyConfigured(f"{self.env} must be at most {self.maximum:g}, got {given}")
        return number


def _whole(value: Any) -> int:
    if isinstance(value, float):
        if not value.is_integer():
            raise ValueError
        return int(value)
    return int(str(value).strip())


def group(title: str, *options: Option) -> tuple[Option, ...]:
    """``options`` filed under ``title``, a heading of the docs' table and of .env.example."""
    return tuple(replace(option, group=title) for option in options)
