"""The dashboard's charts as SVG drawn on the server: no script, and nothing inline that the
Content-Security-Policy would block (colours are classes of admin.css, sizes are attributes).
Every bar is a link to the notifications list filtered to what it counts, and says its count in
its ``<title>`` (its tooltip and its accessible name)."""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from html import escape
from urllib.parse import quote, urlencode

from django.urls import reverse
from django.utils import timezone
from django.utils.safestring import SafeString, mark_safe

from notifications.models import LATENCY_BEYOND_MS, LATENCY_BOUNDS_MS
from notifications.selectors import AccountRate, ChannelSeries, FailureReason, Latency
from notifications.selectors.dashboard import COUNTED, ONLY_ACCOUNT

PLOT_WIDTH = 672  # 28 px an hour over a day, 4 px an hour over a week
PLOT_HEIGHT = 110
LEFT = 44  # the y axis' labels
TOP = 12
BOTTOM = 20  # the x axis' labels


def _attr(value: object) -> str:
    return escape(str(value), quote=True)


def _count(value: int) -> str:
    return f"{value:,}"


def duration(ms: int) -> str:
    if ms >= 3_600_000:
        return f"{ms / 3_600_000:g} h"
    if ms >= 60_000:
        return f"{ms / 60_000:g} min"
    return f"{ms / 1000:g} s" if ms >= 1000 else f"{ms} ms"


def _ceiling(value: int) -> int:
    """The axis' top: the next 1, 2 or 5 times a power of ten at or above ``value``."""
    if value <= 1:
        return 1
    power = 10 ** math.floor(math.log10(value))
    return next(step * power for step in (1, 2, 5, 10) if step * power >= value)


@functools.lru_cache(maxsize=2048)
def _param(name: str, value: str) -> str:
    """``name=value`` for a query string: made once per value (a week's chart has 2,000 links)."""
    return f"{name}={quote(value, safe=':')}"


def _moment(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%MZ")


class ListLinks:
    """Links to the admin lists, filtered as a figure counts: the notifications made from
    ``since`` (or in one hour), of a status, channel, provider account or failure reason."""

    def __init__(self, since: datetime) -> None:
        self.since = since
        self.notifications_url = reverse("admin:notifications_notification_changelist")
        self._ranges: dict[datetime | None, str] = {}
        self._hour_attrs: dict[datetime, str] = {}

    def notifications(
        self,
        *,
        status: str = "",
        channel: str = "",
        hour: datetime | None = None,
        account: str | None = None,
        reason: str = "",
    ) -> str:
        params = [self._created(hour)]
        if status:
            params.append(_param("status__exact", status))
        if channel:
            params.append(_param("channel__exact", channel))
        if account is not None:
            params.append(_param("account", account or ONLY_ACCOUNT))
        if reason:
            params.append(_param("failure_reason", reason))
        return f"{self.notifications_url}?{'&'.join(params)}"

    def hour_attr(self, hour: datetime) -> str:
        """The list of the notifications made in ``hour``, as an attribute's value (escaped), to
        which a chart adds its ``&amp;``-joined filters."""
        if hour not in self._hour_attrs:
            self._hour_attrs[hour] = _attr(f"{self.notifications_url}?{self._created(hour)}")
        return self._hour_attrs[hour]

    def _created(self, hour: datetime | None) -> str:
        """The created date range: from ``since``, or the one ``hour`` (made once per hour)."""
        if hour not in self._ranges:
            since = _param("created_at__gte", _moment(hour or self.since))
            self._ranges[hour] = (
                since if hour is None else f"{since}&{_param('created_at__lt', _moment(hour + timedelta(hours=1)))}"
            )
        return self._ranges[hour]

    @staticmethod
    def dead_letters_unresolved() -> str:
        return f"{reverse('admin:notifications_deadletter_changelist')}?resolved=no"

    @staticmethod
    def attempts_failing(channel: str, account: str) -> str:
        params = {"channel__exact": channel, "account": account or ONLY_ACCOUNT, "outcome__exact": "transient_error"}
        return f"{reverse('admin:notifications_deliveryattempt_changelist')}?{urlencode(params)}"


def _svg(width: int, height: int, label: str, body: list[str], css: str) -> SafeString:
    return mark_safe(  # noqa: S308  (every value in ``body`` went through _attr)
        f'<svg class="chart {css}" viewBox="0 0 {width} {height}" width="{width}" height="{height}" role="img" '
        f'aria-label="{_attr(label)}">{"".join(body)}</svg>'
    )


def _bar(href: str, label: str, css: str, x: float, y: float, width: float, height: float) -> str:
    """A bar that links to ``href``; its ``<title>`` is its tooltip and its accessible name."""
    return (
        f'<a href="{_attr(href)}"><title>{_attr(label)}</title><rect class="{css}" x="{x:.4g}" y="{y:.4g}" '
        f'width="{width:.4g}" height="{height:.4g}"/></a>'
    )


def _text(x: float, y: float, text: str, css: str = "", anchor: str = "start") -> str:
    return f'<text x="{x:.1f}" y="{y:.1f}" text-anchor="{anchor}" class="{css}">{_attr(text)}</text>'


@dataclass(frozen=True)
class HourAxis:
    """The window's hours as the charts say them: each one's name ("2026-12-05 07:00" in
    TIME_ZONE) and its label under the axis (every third hour over a day, each midnight over a
    week; None between), worked out once for all the channels' charts."""

    hours: list[datetime]
    names: list[str]
    ticks: list[str | None]

    @classmethod
    def of(cls, hours: list[datetime]) -> HourAxis:
        local = [timezone.localtime(hour) for hour in hours]
        if len(hours) <= 48:
            ticks = [f"{moment:%H}:00" if moment.hour % 3 == 0 else None for moment in local]
        else:
            ticks = [f"{moment:%a %d}" if moment.hour == 0 else None for moment in local]
        return cls(hours, [f"{moment:%Y-%m-%d %H}:00" for moment in local], ticks)


def channel_chart(series: ChannelSeries, axis: HourAxis, links: ListLinks) -> SafeString:
    """Delivered, failed and dead per hour of one channel, stacked."""
    hours = axis.hours
    slot = PLOT_WIDTH / len(hours)
    gap = 2 if slot > 8 else 1 if slot > 2 else 0
    totals = [sum(series.counts[status][index] for status in COUNTED) for index in range(len(hours))]
    top = _ceiling(max(totals, default=0))
    width, height = LEFT + PLOT_WIDTH + 4, TOP + PLOT_HEIGHT + BOTTOM
    base = TOP + PLOT_HEIGHT
    body = [
        f'<line class="axis" x1="{LEFT}" y1="{base}" x2="{LEFT + PLOT_WIDTH}" y2="{base}"/>',
        _text(LEFT - 4, TOP + 4, _count(top), "tick", "end"),
        _text(LEFT - 4, base, "0", "tick", "end"),
    ]
    # A week is 2,000 bars: each one's link and title are put together from parts escaped once.
    channel = _attr(series.channel)
    tails = {
        status: _attr(f"&{_param('status__exact', status)}&{_param('channel__exact', series.channel)}") for status in COUNTED
    }
    width_attr = f"{slot - gap:.4g}"
    for index, hour in enumerate(hours):
        x = f"{LEFT + index * slot:.4g}"
        tick = axis.ticks[index]
        if tick:
            body.append(_text(LEFT + index * slot, base + 14, tick, "tick"))
        y = float(base)
        for status in COUNTED:
            count = series.counts[status][index]
            if not count:
                continue
            bar = PLOT_HEIGHT * count / top
            y -= bar
            body.append(
                f'<a href="{links.hour_attr(hour)}{tails[status]}"><title>{channel} {axis.names[index]}: {count} {status}</title>'
                f'<rect class="bar-{status}" x="{x}" y="{y:.4g}" width="{width_attr}" height="{bar:.4g}"/></a>'
            )
    said = ", ".join(f"{series.total(status)} {status}" for status in COUNTED)
    return _svg(width, height, f"{series.channel}, by hour: {said}", body, "chart-hours")


def _row_label(rate: AccountRate) -> str:
    return f"{rate.channel} · {rate.account or '(only account)'}"


def account_chart(rates: list[AccountRate], links: ListLinks) -> SafeString:
    """Each provider account's share of delivered, failed and dead, one bar each."""
    label_width, bar_width, row = 190, 380, 24
    width, height = label_width + bar_width + 120, row * len(rates) + 4
    body = []
    for index, rate in enumerate(rates):
        y = index * row + 2
        body.append(_text(0, y + 15, _row_label(rate), "label"))
        x = float(label_width)
        for status, count in ((COUNTED[0], rate.delivered), (COUNTED[1], rate.failed), (COUNTED[2], rate.dead)):
            if not count:
                continue
            share = bar_width * count / rate.total
            href = links.notifications(status=status, channel=rate.channel, account=rate.account)
            body.append(_bar(href, f"{_row_label(rate)}: {count} {status}", f"bar-{status}", x, y, share, row - 6))
            x += share
        body.append(_text(label_width + bar_width + 8, y + 15, f"{rate.rate:.1%} of {_count(rate.total)}", "label"))
    said = "; ".join(f"{_row_label(rate)}: {rate.rate:.1%} delivered of {rate.total}" for rate in rates)
    return _svg(width, height, f"Delivery rate per provider account: {said}", body, "chart-accounts")


def failure_chart(reasons: list[FailureReason], links: ListLinks) -> SafeString:
    """The most frequent failure reasons, longest bar first."""
    label_width, bar_width, row = 290, 300, 24
    width, height = label_width + bar_width + 70, row * len(reasons) + 4
    most = max((reason.count for reason in reasons), default=1)
    body = []
    for index, reason in enumerate(reasons):
        y = index * row + 2
        said = f"{reason.reason} ({reason.channel})"
        body.append(_text(0, y + 15, said, "label"))
        length = max(2.0, bar_width * reason.count / most)
        href = links.notifications(channel=reason.channel, reason=reason.reason)
        body.append(_bar(href, f"{said}: {reason.count} failed or dead", "bar-failed", label_width, y, length, row - 6))
        body.append(_text(label_width + length + 6, y + 15, _count(reason.count), "label"))
    return _svg(
        width,
        height,
        "Top failure reasons: " + "; ".join(f"{r.reason} ({r.channel}): {r.count}" for r in reasons),
        body,
        "chart-reasons",
    )


def latency_chart(latency: Latency, links: ListLinks) -> SafeString:
    """The accept-to-delivered histogram, with the bucket of the p95 marked."""
    p95 = latency.percentile(0.95)
    slot, height = 64, 110
    width = slot * len(latency.buckets) + 8
    most = max((count for _, count in latency.buckets), default=1)
    href = links.notifications(status=COUNTED[0])
    body = []
    for index, (bound, count) in enumerate(latency.buckets):
        bar = (height - 40) * count / most
        x = 4 + index * slot
        css = "bar-delivered bar-p95" if bound == p95 else "bar-delivered"
        within = f"> {duration(LATENCY_BOUNDS_MS[-1])}" if bound == LATENCY_BEYOND_MS else f"≤ {duration(bound)}"
        body.append(_bar(href, f"{count} delivered within {within}", css, x, height - 20 - bar, slot - 6, bar))
        body.append(_text(x + (slot - 6) / 2, height - 6, within, "tick", "middle"))
    said = f"p95 ≤ {duration(p95)} of {latency.total} deliveries" if p95 is not None else "no deliveries"
    return _svg(width, height, f"Accept to delivered: {said}", body, "chart-latency")
