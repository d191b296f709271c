"""How bench/RESULTS.md writes a goal met and a time in milliseconds."""

from __future__ import annotations


def met(ok: bool) -> str:
    return "**yes**" if ok else "**no**"


def ms(value: float) -> str:
    return f"{value:.1f}" if value < 100 else f"{value:.0f}"
