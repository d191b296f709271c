"""Quiet hours: a recipient's daily window, in their own time zone, when nothing non-critical is sent."""

from __future__ import annotations

import re
import zoneinfo
from datetime import UTC, date, datetime, time, timedelta
from typing import Any

from ...errors import ValidationFailed

_HH_MM = re.compile(r"^([01]\d|2[0-3]):([0-5]\d)$")


def time_zone_check(name: str, *, field: str = "timezone") -> str:
    """``name`` when it is an IANA time zone (Europe/Berlin); ValidationFailed otherwise."""
    try:
        zoneinfo.ZoneInfo(name)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError):
        raise ValidationFailed(f"{name!r} is not an IANA time zone (e.g. Europe/Paris)", extra={"field": field}) from None
    return name


def quiet_hours_check(value: Any, *, timezone: str, field: str = "quiet_hours") -> dict[str, str] | None:
    """``{"start": "HH:MM", "end": "HH:MM"}`` as stored, or None for no quiet hours; ValidationFailed
    naming the field otherwise. They need the recipient's time zone to mean anything."""
    if value is None:
        return None
    if not isinstance(value, dict) or set(value) != {"start", "end"}:
        raise ValidationFailed('quiet_hours is {"start": "HH:MM", "end": "HH:MM"} or null', extra={"field": field})
    for name in ("start", "end"):
        if not isinstance(value[name], str) or not _HH_MM.match(value[name]):
            raise ValidationFailed(f"quiet_hours.{name} is a 24-hour time such as 22:00", extra={"field": f"{field}.{name}"})
    if value["start"] == value["end"]:
        raise ValidationFailed("quiet_hours start and end must differ", extra={"field": field})
    if not timezone:
        raise ValidationFailed("quiet_hours need the recipient's timezone (an IANA name)", extra={"field": "timezone"})
    return {"start": value["start"], "end": value["end"]}


def quiet_hours_end(*, at: datetime, quiet_hours: dict[str, str] | None, timezone: str) -> datetime | None:
    """The end of the quiet window ``at`` falls in, in UTC; None when it falls in none.

    The window is wall-clock time in the recipient's zone and may cross midnight (22:00-08:00).
    Its end is that wall-clock time on the right local day, converted with zoneinfo, so it stays
    08:00 local across a DST change (a night then lasts 9 or 11 hours, not 10). An end that does
    not exist that day (in the hour skipped in spring) is read with the offset before the change,
    i.e. up to an hour later, never earlier: quiet hours err on the side of quiet.
    """
    if not quiet_hours or not timezone:
        return None
    try:
        zone = zoneinfo.ZoneInfo(timezone)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError):
        return None  # stored before it was validated; sending beats holding forever
    start, end = _parse(quiet_hours["start"]), _parse(quiet_hours["end"])
    local = at.astimezone(zone)
    now = local.time().replace(tzinfo=None)
    crosses_midnight = start > end
    inside = (now >= start or now < end) if crosses_midnight else (start <= now < end)
    if not inside:
        return None
    end_day: date = local.date() if now < end else local.date() + timedelta(days=1)
    return datetime.combine(end_day, end, tzinfo=zone).astimezone(UTC)


def _parse(value: str) -> time:
    hours, minutes = value.split(":")
    return time(int(hours), int(minutes))
