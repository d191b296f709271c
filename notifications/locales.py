"""Locale tags (BCP 47, as ``fr-CA``): their one spelling, and the fallback from specific to general."""

from __future__ import annotations

import re

from .errors import ValidationFailed

# language, then optional script, region or variant subtags: en, fr-CA, zh-Hant-TW, de-CH-1996. The
# API's schema says the same pattern (an ECMA regex too), so what it calls valid the server accepts.
LOCALE_PATTERN = r"^[A-Za-z]{2,8}([-_][A-Za-z0-9]{1,8})*$"
_LOCALE_RE = re.compile(LOCALE_PATTERN)
MAX_LOCALE_LENGTH = 35  # the Recipient.locale and TemplateVariant.locale columns


def locale_normalize(value: str, *, field: str = "locale") -> str:
    """``value`` in its usual spelling (``fr_ca`` -> ``fr-CA``, ``ZH-hant`` -> ``zh-Hant``), so
    variants and requests compare equal however a client writes them; ValidationFailed otherwise."""
    if len(value) > MAX_LOCALE_LENGTH or not _LOCALE_RE.match(value):
        raise ValidationFailed(f"{value!r} is not a locale such as 'en' or 'fr-CA'", extra={"field": field})
    language, *rest = value.replace("_", "-").split("-")
    subtags = [language.lower()]
    for subtag in rest:
        if len(subtag) == 2 and subtag.isalpha():
            subtags.append(subtag.upper())  # region
        elif len(subtag) == 4 and subtag.isalpha():
            subtags.append(subtag.title())  # script
        else:
            subtags.append(subtag.lower())
    return "-".join(subtags)


def locale_fallbacks(locale: str, *, default: str) -> list[str]:
    """The locales to try, most specific first: ``fr-CA`` -> ``fr-CA``, ``fr``, then ``default``
    and its own parents; each once."""
    chain: list[str] = []
    for tag in (locale, default):
        parts = tag.split("-") if tag else []
        for end in range(len(parts), 0, -1):
            candidate = "-".join(parts[:end])
            if candidate not in chain:
                chain.append(candidate)
    return chain
