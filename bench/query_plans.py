"""The queries a page runs and their plans: the page rendered once in the bench process (Django's
test client) with every query captured, then each query on the notifications table run again
under ``EXPLAIN (ANALYZE, BUFFERS)`` and reduced to one line."""

from __future__ import annotations

import json
import re
import time
import warnings
from dataclasses import dataclass
from typing import Any

from bench.accept_http import api_token


@dataclass(frozen=True)
class QueryPlan:
    kind: str  # on the notifications table: "count" (the paginator's) or "page"; else "other"
    in_page_ms: float  # its time when the page ran it (1 ms resolution)
    ms: float = 0.0  # EXPLAIN ANALYZE's execution time, run again after the page
    line: str = ""  # the plan's nodes, depth first; for another table's query, its table
    seq_scan: bool = False  # reads the whole notifications table
    sorted_rows: int = 0  # rows into the largest full Sort (0: none)


def _plan(sql: str, plan: dict[str, Any], table: str, in_page_ms: float) -> QueryPlan:
    parts: list[str] = []
    seq_scan, sorted_rows = False, 0

    def walk(node: dict[str, Any]) -> None:
        nonlocal seq_scan, sorted_rows
        kind = node["Node Type"]
        text = kind
        if node.get("Index Name"):
            text += f" using {node['Index Name']}"
        elif node.get("Relation Name"):
            text += f" on {node['Relation Name']}"
        if node.get("Sort Method"):
            text += f" ({node['Sort Method']})"
        parts.append(f"{text} [rows {node.get('Actual Rows', '?')}]")
        seq_scan |= kind.endswith("Seq Scan") and node.get("Relation Name") == table
        if kind == "Sort":
            sorted_rows = max([sorted_rows, *(int(child.get("Actual Rows", 0)) for child in node.get("Plans", []))])
        for child in node.get("Plans", []):
            walk(child)

    walk(plan["Plan"])
    return QueryPlan(
        kind="count" if re.match(r"\s*SELECT\s+COUNT\(", sql, re.IGNORECASE) else "page",
        in_page_ms=in_page_ms,
        ms=float(plan["Execution Time"]),
        line=" → ".join(parts),
        seq_scan=seq_scan,
        sorted_rows=sorted_rows,
    )


@dataclass(frozen=True)
class Render:
    ms: float  # one request through Django's test client, after a warm-up one
    queries: int  # every query it ran
    queries_ms: float  # their time, as the database cursor measured it


def explain(path: str, *, admin: bool) -> tuple[Render, list[QueryPlan]]:
    """Render ``path`` in-process with its queries captured; EXPLAIN ANALYZE those on notifications
    (the others, on sessions, users and clients, are listed with their time only).
    ``admin``: as the bench's superuser (list_scale makes it), else as the bench's API client."""
    from django.contrib.auth import get_user_model
    from django.db import connection
    from django.test import Client
    from django.test.utils import CaptureQueriesContext

    from notifications.models import Notification

    client = Client()
    headers: dict[str, str] = {}
    if admin:
        client.force_login(get_user_model().objects.get(username="bench"))
    else:
        headers["Authorization"] = f"Bearer {api_token()}"
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="No directory at")  # whitenoise: no collectstatic here
        client.get(path, headers=headers)
        with CaptureQueriesContext(connection) as captured:
            started = time.perf_counter()
            response = client.get(path, headers=headers)
            elapsed = time.perf_counter() - started
    if response.status_code != 200:
        raise SystemExit(f"bench: {path} answered {response.status_code} in-process")
    table = Notification._meta.db_table
    plans = []
    for query in captured.captured_queries:
        sql, in_page_ms = query["sql"], float(query["time"]) * 1000
        if table not in sql or not sql.lstrip().upper().startswith("SELECT"):
            source = re.search(r'\bFROM\s+"?(\w+)', sql, re.IGNORECASE)
            plans.append(QueryPlan(kind="other", in_page_ms=in_page_ms, line=source[1] if source else sql[:40]))
            continue
        with connection.cursor() as cursor:
            cursor.execute(f"EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) {sql}")
            raw = cursor.fetchone()[0]
        plans.append(_plan(sql, (json.loads(raw) if isinstance(raw, str) else raw)[0], table, in_page_ms))
    queries_ms = sum(float(query["time"]) for query in captured.captured_queries) * 1000
    return Render(ms=elapsed * 1000, queries=len(captured.captured_queries), queries_ms=queries_ms), plans


def unindexed_search_fields() -> list[str]:
    """The admin's search fields that no index starts with (an OR of them cannot use indexes)."""
    from django.contrib import admin

    from notifications.models import Notification

    meta = Notification._meta
    leading = {meta.get_field(index.fields[0].lstrip("-")).column for index in meta.indexes if index.fields}
    leading |= {field.column for field in meta.concrete_fields if field.primary_key or field.unique or field.db_index}
    search_fields = admin.site._registry[Notification].search_fields
    return [name for name in search_fields if meta.get_field(name).column not in leading]
