"""The admin dashboard at scale (issue #25): its p95 over HTTP at 1,000,000 notifications.

The notifications are bench/bulk_notifications.py's, all made in the last 7 days (the dashboard's
longest window, so every one of them is in it), each finished one with its attempt through one of
two provider accounts; the dashboard's counters are counted from them by the same rebuild an
upgrade runs (``manage.py outcome_counts_rebuild``). Then the admin index is requested over HTTP
from gunicorn by a logged-in support user, for the last 24 hours and the last 7 days, N times each.

Beside it, the other idea the issue asked to measure: the same figures read straight from the
notifications with indexed queries, timed in the bench process on the same database.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from datetime import timedelta

from bench.accept_http import web_server
from bench.bulk_notifications import generate
from bench.harness import log, percentile
from bench.list_scale import _admin_session, _timed

GOAL_MS = 300.0
DAYS = 7
SUPPORT_USER = ("bench-support", "bench-support-password-not-secret")

# The indexed-query alternative: each figure read from the notifications made in the window.
# {since} is the window's start; the (status, created_at) and (created_at) indexes serve them.
INDEXED_QUERIES = {
    "statuses": "SELECT status, count(*) FROM notifications_notification WHERE created_at >= {since} GROUP BY status",
    "by hour": (
        "SELECT date_trunc('hour', created_at), channel, status, count(*) FROM notifications_notification "
        "WHERE created_at >= {since} AND status IN ('delivered', 'failed', 'dead') GROUP BY 1, 2, 3"
    ),
    "per account": (
        "SELECT n.channel, a.account, n.status, count(*) FROM notifications_notification n "
        "JOIN notifications_deliveryattempt a ON a.notification_id = n.id AND a.number = n.attempt_count "
        "WHERE n.created_at >= {since} AND n.status IN ('delivered', 'failed', 'dead') GROUP BY 1, 2, 3"
    ),
    "failure reasons": (
        "SELECT channel, failure_reason, count(*) FROM notifications_notification "
        "WHERE created_at >= {since} AND status IN ('failed', 'dead') GROUP BY 1, 2 ORDER BY 3 DESC LIMIT 10"
    ),
    "p95": (
        "SELECT percentile_cont(0.95) WITHIN GROUP (ORDER BY delivered_at - created_at) FROM notifications_notification "
        "WHERE created_at >= {since} AND status = 'delivered'"
    ),
}


@dataclass
class Window:
    name: str
    path: str
    p50_ms: float
    p95_ms: float
    selector_ms: float  # selectors.dashboard() alone, in the bench process
    indexed_ms: dict[str, float] = field(default_factory=dict)  # the indexed-query alternative, per figure

    @property
    def ok(self) -> bool:
        return self.p95_ms < GOAL_MS


@dataclass
class DashboardResult:
    rows: int
    requests: int
    generate_seconds: float
    rebuild_seconds: float
    counter_rows: int
    windows: list[Window]


def _attempts() -> None:
    """One attempt for each finished notification, through account primary or (a tenth of email
    and SMS) backup, as failover makes; loaded as bulk_notifications loads the notifications."""
    from django.db import connection, transaction

    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("SET LOCAL synchronous_commit = off")
        cursor.execute("SET LOCAL session_replication_role = replica")
        cursor.execute(
            "INSERT INTO notifications_deliveryattempt (notification_id, number, started_at, finished_at, outcome, "
            "error_class, error_message, provider_response, duration_ms, channel, account) "
            "SELECT id, attempt_count, created_at, updated_at, CASE status WHEN 'delivered' THEN 'delivered' "
            "WHEN 'failed' THEN 'permanent_error' ELSE 'transient_error' END, '', '', '', 50, channel, "
            "CASE WHEN channel IN ('email', 'sms') AND random() < 0.1 THEN 'backup' ELSE 'primary' END "
            "FROM notifications_notification WHERE status IN ('delivered', 'failed', 'dead')"
        )
    with connection.cursor() as cursor:
        cursor.execute("VACUUM (ANALYZE) notifications_deliveryattempt")


def _support_user() -> tuple[str, str]:
    from django.contrib.auth import get_user_model
    from django.contrib.auth.models import Group

    username, password = SUPPORT_USER
    user = get_user_model().objects.filter(username=username).first()
    if user is None:
        user = get_user_model().objects.create_user(username, password=password, is_staff=True)
        user.groups.add(Group.objects.get(name="support"))
    return username, password


def _indexed(hours: int) -> dict[str, float]:
    """Each indexed query's best of three, in ms."""
    from django.db import connection

    timings = {}
    since = f"now() - interval '{hours} hours'"
    with connection.cursor() as cursor:
        for name, sql in INDEXED_QUERIES.items():
            best = float("inf")
            for _ in range(3):
                started = time.perf_counter()
                cursor.execute(sql.format(since=since))
                cursor.fetchall()
                best = min(best, time.perf_counter() - started)
            timings[name] = best * 1000
    return timings


def _selector_ms(hours: int) -> float:
    from notifications import selectors

    best = float("inf")
    for _ in range(5):
        started = time.perf_counter()
        selectors.dashboard(hours=hours)
        best = min(best, time.perf_counter() - started)
    return best * 1000


def dashboard_bench(*, rows: int, requests: int, warmup: int = 3) -> DashboardResult:
    from django.db import connection
    from django.utils import timezone

    from bench.drain import notifications_reset
    from notifications import services
    from notifications.models import OutcomeCount

    notifications_reset()
    with connection.cursor() as cursor:
        cursor.execute("TRUNCATE notifications_outcomecount")
    log(f"dashboard: generating {rows:,} notifications over {DAYS} days, and their attempts")
    facts = generate(rows, days=DAYS)
    _attempts()
    started = time.monotonic()
    services.outcome_counts_rebuild(since=timezone.now() - timedelta(days=DAYS + 1))
    rebuild_seconds = time.monotonic() - started
    log(f"dashboard: generated in {facts['seconds']:.0f} s, counters rebuilt in {rebuild_seconds:.0f} s; timing the index")
    windows = []
    with web_server(workers=1) as (url, _server):
        session = _admin_session(url, credentials=_support_user())
        for name, path, hours in (("last 24 hours", "/admin/", 24), ("last 7 days", "/admin/?window=7d", 24 * DAYS)):
            times, _ = _timed(session, f"{url}{path}", warmup=warmup, count=requests)
            windows.append(Window(name, path, percentile(times, 0.5) * 1000, percentile(times, 0.95) * 1000, _selector_ms(hours)))
            log(f"dashboard {name}: p95 {windows[-1].p95_ms:.0f} ms")
    for window, hours in zip(windows, (24, 24 * DAYS), strict=True):
        window.indexed_ms = _indexed(hours)
    return DashboardResult(
        rows=rows,
        requests=requests,
        generate_seconds=facts["seconds"],
        rebuild_seconds=rebuild_seconds,
        counter_rows=OutcomeCount.objects.count(),
        windows=windows,
    )


def section(result: DashboardResult) -> list[str]:
    lines = [
        "## The admin dashboard (issue #25)",
        "",
        f"{result.rows:,} notifications made over the last {DAYS} days, {result.counter_rows:,} counter rows "
        f"(rebuilt from them in {result.rebuild_seconds:.1f} s); GET as a logged-in support user from gunicorn, "
        f"{result.requests} times each after a warm-up.",
        "",
        "| Window | Page | p50 | p95 | Goal < 300 ms | selectors.dashboard() alone |",
        "|---|---|---:|---:|---|---:|",
    ]
    for window in result.windows:
        lines.append(
            f"| {window.name} | `{window.path}` | {window.p50_ms:.0f} ms | {window.p95_ms:.0f} ms | "
            f"{'**yes**' if window.ok else '**no**'} | {window.selector_ms:.1f} ms |"
        )
    names = list(INDEXED_QUERIES)
    lines += [
        "",
        "The other idea, measured on the same rows: each figure read from the notifications by an indexed query "
        "(best of three, ms):",
        "",
        "| Window | " + " | ".join(names) + " | Sum |",
        "|---|" + "---:|" * (len(names) + 1),
    ]
    for window in result.windows:
        cells = " | ".join(f"{window.indexed_ms[name]:.0f}" for name in names)
        lines.append(f"| {window.name} | {cells} | {sum(window.indexed_ms.values()):.0f} |")
    return lines
