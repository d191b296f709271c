"""Lists at scale: first-page latency of the API's and the admin's notification lists over HTTP with
many notifications in the table (bench/bulk_notifications.py), and the plan of every query each
page runs (bench/query_plans.py), with what makes a slow page slow.

Each page is requested over HTTP from gunicorn (as deployed) a few times to warm up, then N times
in a row; /healthz on the same server the same way is the baseline.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

from bench.accept_http import api_token, web_server
from bench.bulk_notifications import generate
from bench.harness import log, percentile
from bench.query_plans import QueryPlan, Render, explain, unindexed_search_fields

GOAL_MS = 150.0


@dataclass(frozen=True)
class Page:
    name: str
    path: str
    admin: bool


@dataclass
class PageResult:
    page: Page
    p50_ms: float
    p95_ms: float
    status: int
    plans: list[QueryPlan] = field(default_factory=list)
    render: Render | None = None  # the same page rendered in the bench process

    @property
    def ok(self) -> bool:
        return self.p95_ms < GOAL_MS


@dataclass(frozen=True)
class ScaleResult:
    rows: int
    generate_seconds: float
    healthz_p50_ms: float
    healthz_p95_ms: float
    pages: list[PageResult]
    notes: list[str]


def pages(facts: dict[str, Any]) -> list[Page]:
    changelist = "/admin/notifications/notification/"
    return [
        Page("API: unfiltered", "/api/v1/notifications", admin=False),
        Page("API: status=failed", "/api/v1/notifications?status=failed", admin=False),
        Page(
            f"API: user_id (heaviest user, {facts['heavy_rows']} rows)",
            f"/api/v1/notifications?user_id={facts['heavy_user']}",
            admin=False,
        ),
        Page(
            f"API: user_id (a median user, {facts['typical_rows']} rows)",
            f"/api/v1/notifications?user_id={facts['typical_user']}",
            admin=False,
        ),
        Page("Admin: unfiltered", changelist, admin=True),
        Page("Admin: status=failed", f"{changelist}?status__exact=failed", admin=True),
        Page("Admin: search by id", f"{changelist}?q={facts['id']}", admin=True),
        Page(f"Admin: search by address ({facts['address_rows']} rows)", f"{changelist}?q={quote(facts['address'])}", admin=True),
    ]


def _superuser() -> tuple[str, str]:
    from django.contrib.auth import get_user_model

    password = "bench-password-not-secret"
    user_model = get_user_model()
    if not user_model.objects.filter(username="bench").exists():
        user_model.objects.create_superuser("bench", "bench@example.com", password)
    return "bench", password


def _admin_session(url: str, credentials: tuple[str, str] | None = None) -> Any:
    import requests

    username, password = credentials or _superuser()
    session = requests.Session()
    login = f"{url}/admin/login/"
    form = session.get(login, timeout=10)
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', form.text)
    if token is None:
        raise SystemExit(f"bench: no CSRF token on the admin login page ({form.status_code})")
    answer = session.post(
        login,
        data={"csrfmiddlewaretoken": token.group(1), "username": username, "password": password, "next": "/admin/"},
        headers={"Referer": login},
        timeout=10,
        allow_redirects=False,
    )
    if answer.status_code != 302:
        raise SystemExit(f"bench: the admin login failed ({answer.status_code}): {answer.text[:300]}")
    return session


def _timed(session: Any, url: str, *, warmup: int, count: int) -> tuple[list[float], int]:
    status = 0
    times: list[float] = []
    for index in range(warmup + count):
        started = time.perf_counter()
        response = session.get(url, timeout=30)
        elapsed = time.perf_counter() - started
        status = response.status_code
        if status != 200:
            raise SystemExit(f"bench: GET {url} answered {status}: {response.text[:300]}")
        if index >= warmup:
            times.append(elapsed)
    return times, status


def _notes(results: list[PageResult]) -> list[str]:
    """What makes each slow page slow, read from its plans."""
    notes = []
    for result in results:
        if result.ok:
            continue
        name = result.page.name
        render = result.render
        if render is not None and render.queries_ms < render.ms / 2:
            notes.append(
                f"{name}: rendered in the bench process it takes {render.ms:.0f} ms, of which {render.queries_ms:.0f} ms in its "
                f"{render.queries} queries: most of the page's time is Python (middleware, the view, the template), not "
                "PostgreSQL."
            )
        for plan in result.plans:
            if plan.kind == "other":
                if plan.in_page_ms >= 20:
                    notes.append(f"{name}: a query on {plan.line} took {plan.in_page_ms:.0f} ms in the page.")
                continue
            if plan.ms < 10:
                continue
            if plan.seq_scan:
                missing = unindexed_search_fields() if "?q=" in result.page.path else []
                why = f": the admin search ORs {', '.join(missing)} without an index" if missing else ""
                notes.append(
                    f"{name}: a sequential scan of the notifications table ({plan.ms:.0f} ms, {plan.kind} query){why}; an OR "
                    "can use indexes only when every column in it has one."
                )
            elif plan.kind == "count":
                notes.append(
                    f"{name}: the changelist paginator's COUNT(*) takes {plan.ms:.0f} ms (`{plan.line}`). Django's admin "
                    "counts the (filtered) rows on every page even with show_full_result_count = False; a paginator whose "
                    "count is PostgreSQL's estimate (pg_class.reltuples unfiltered, or EXPLAIN's row estimate) or a capped "
                    "count (`SELECT count(*) FROM (... LIMIT 10001)`) would remove it."
                )
            elif plan.sorted_rows > 1000:
                notes.append(
                    f"{name}: the page sorts {plan.sorted_rows} rows to show the newest ({plan.ms:.0f} ms); an index on "
                    "(the filter's columns, created_at) would read the page in order."
                )
            else:
                notes.append(f"{name}: a {plan.kind} query takes {plan.ms:.0f} ms: `{plan.line}`.")
    return notes


def list_scale(*, rows: int, requests: int, warmup: int = 3) -> ScaleResult:
    import requests as http

    from bench.drain import notifications_reset

    notifications_reset()
    log(f"scale: generating {rows} notifications")
    facts = generate(rows)
    log(f"scale: generated in {facts['seconds']:.0f}s; timing the pages")
    results: list[PageResult] = []
    with web_server(workers=1) as (url, _server):
        plain = http.Session()
        healthz, _ = _timed(plain, f"{url}/healthz", warmup=warmup, count=requests)
        api = http.Session()
        api.headers["Authorization"] = f"Bearer {api_token()}"
        admin = _admin_session(url)
        for page in pages(facts):
            times, status = _timed(admin if page.admin else api, f"{url}{page.path}", warmup=warmup, count=requests)
            results.append(PageResult(page, percentile(times, 0.5) * 1000, percentile(times, 0.95) * 1000, status))
    for result in results:
        result.render, result.plans = explain(result.page.path, admin=result.page.admin)
    return ScaleResult(
        rows=rows,
        generate_seconds=facts["seconds"],
        healthz_p50_ms=percentile(healthz, 0.5) * 1000,
        healthz_p95_ms=percentile(healthz, 0.95) * 1000,
        pages=results,
        notes=_notes(results),
    )
