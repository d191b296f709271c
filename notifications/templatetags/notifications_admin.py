"""Template tags of the support admin: the dashboard on the admin index."""

from __future__ import annotations

from typing import Any

from django import template

from notifications import selectors
from notifications.selectors.dashboard import COUNTED
from notifications.services.delivery.failover import provider_circuits_open

from . import dashboard_charts as charts

register = template.Library()

# The windows the dashboard shows (?window=): hourly buckets over a day or a week.
WINDOWS = {"24h": ("the last 24 hours", 24), "7d": ("the last 7 days", 24 * 7)}


@register.inclusion_tag("admin/notifications/dashboard.html", takes_context=True)
def dashboard(context: template.Context) -> dict[str, Any]:
    """The figures of the chosen window, drawn, each with the link to the list it counts."""
    request = context["request"]
    window = request.GET.get("window", "24h")
    if window not in WINDOWS:
        window = "24h"
    title, hours = WINDOWS[window]
    board = selectors.dashboard(hours=hours)
    links = charts.ListLinks(since=board.since)
    axis = charts.HourAxis.of(board.hours)
    circuits = provider_circuits_open()  # open or half-open: their sends go to the next account
    return {
        "board": board,
        "title": title,
        "window": window,
        "windows": [(key, label) for key, (label, _) in WINDOWS.items()],
        "statuses": [(status, count, links.notifications(status=status)) for status, count in board.status_counts.items()],
        "all_link": links.notifications(),
        "channel_charts": [
            {
                "channel": series.channel,
                "chart": charts.channel_chart(series, axis, links),
                "legend": [
                    (status, series.total(status), links.notifications(status=status, channel=series.channel))
                    for status in COUNTED
                ],
            }
            for series in board.channels
        ],
        "account_chart": charts.account_chart(board.accounts, links) if board.accounts else "",
        "failure_chart": charts.failure_chart(board.failure_reasons, links) if board.failure_reasons else "",
        "latency_chart": charts.latency_chart(board.latency, links) if board.latency.total else "",
        "p50": board.latency.percentile(0.5),
        "p95": board.latency.percentile(0.95),
        "delivered_link": links.notifications(status="delivered"),
        "dead_letters_link": links.dead_letters_unresolved(),
        "circuits": [(circuit, links.attempts_failing(circuit.channel, circuit.account)) for circuit in circuits],
        "can_see_dead_letters": context["perms"]["notifications"]["view_deadletter"],
    }


@register.filter
def duration_ms(value: int | None) -> str:
    """A histogram bound in ms as a reader says it (250 ms, 2.5 s, 5 min)."""
    return "-" if value is None else charts.duration(value)
