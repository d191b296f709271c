"""Rate-limit accuracy: a backlog of many times the email limit drained by 2 worker processes; the
most sends in any 1 s sliding window against the limit, and the average rate as a share of it."""

from __future__ import annotations

import bisect
from dataclasses import dataclass

from bench.drain import backlog_accept, backlog_drain, notifications_reset


@dataclass(frozen=True)
class Accuracy:
    limit: int
    sends: int
    max_window: int
    average_rate: float


def max_in_window(times: list[float], window: float = 1.0) -> int:
    """The most timestamps in any half-open window [t, t + window), t sliding over every send."""
    return max(bisect.bisect_left(times, start + window) - index for index, start in enumerate(times))


def rate_limit_accuracy(limit: int, backlog: int) -> Accuracy:
    from bench.noop_provider import send_count, send_times, sends_clear

    notifications_reset()
    ids = backlog_accept(backlog, tag="rate-limit")
    sends_clear()
    backlog_drain(
        ids,
        processes=2,
        first_send=lambda: (send_times() or [None])[0],
        sent=send_count,
        NOTIFICATIONS_RATE_LIMITS=f"email={limit}/s",
    )
    times = send_times()
    return Accuracy(
        limit=limit, sends=len(times), max_window=max_in_window(times), average_rate=(len(times) - 1) / (times[-1] - times[0])
    )
