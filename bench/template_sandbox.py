"""What the render sandbox (issue #36: notifications/services/policy/render_sandbox.py) costs on
the accept path, against the same work in the process itself, measured turn about in one run:

1. the render alone: ``variant_render`` of the seeded ``order_created`` template (subject and
   body, four variables), in this process (TEMPLATE_SANDBOX_PROCESSES=0) and through the sandbox
   (its default, 2 processes), one render at a time, alternating;
2. an accept over HTTP that renders it: two gunicorns as deployed (gunicorn.conf.py, 2 workers),
   one with the sandbox off, one with it on, one request in flight at a time, turn about (as
   bench/group_latency.py does for the group commit).

The figures are the ratios sandboxed / in-process of the p50 and p95 latencies.
"""

from __future__ import annotations

import http.client
import time
from dataclasses import dataclass
from urllib.parse import urlsplit

from bench.accept_http import api_token, web_server
from bench.accept_sender import accept_post
from bench.drain import notifications_reset, queue_purge
from bench.end_to_end import Latencies
from bench.harness import log

WARMUP = 100  # first renders and accepts compile, connect and start the sandbox's processes
DATA = {"order_id": 1042, "project_id": "apollo", "description": "Two seats, aisle", "amount": "120.00"}
CONTENT = {"template": "order_created", "data": DATA}


@dataclass(frozen=True)
class TemplateSandboxCost:
    render_off: Latencies
    render_on: Latencies
    accept_off: Latencies
    accept_on: Latencies
    errors: int

    def lines(self) -> list[str]:
        rows = [
            ("render alone (`variant_render`, this process)", self.render_off, self.render_on),
            ("accept over HTTP with the template (gunicorn, 2 workers)", self.accept_off, self.accept_on),
        ]
        lines = [
            "## The render sandbox on the accept path (issue #36)",
            "",
            "`order_created` (subject and body, four variables) rendered in the process and through the sandbox "
            "(TEMPLATE_SANDBOX_PROCESSES 0 against 2), one at a time, turn about (bench/template_sandbox.py).",
            "",
            "| | n | in-process p50 / p95 ms | sandboxed p50 / p95 ms | sandboxed / in-process p50 | p95 |",
            "|---|---:|---:|---:|---:|---:|",
        ]
        for name, off, on in rows:
            lines.append(
                f"| {name} | {on.count} | {off.p50_ms:.2f} / {off.p95_ms:.2f} | {on.p50_ms:.2f} / {on.p95_ms:.2f} | "
                f"**{on.p50_ms / off.p50_ms:.2f}** | {on.p95_ms / off.p95_ms:.2f} |"
            )
        lines += ["", f"Accepts not answered 202: {self.errors}."]
        return lines


def template_sandbox_cost(*, renders: int, requests: int) -> TemplateSandboxCost:
    render_off, render_on = _renders(renders)
    log(f"template sandbox: render p50 {render_off.p50_ms:.3f} ms in-process, {render_on.p50_ms:.3f} ms sandboxed")
    accept_off, accept_on, errors = _accepts(requests)
    log(f"template sandbox: accept p50 {accept_off.p50_ms:.2f} ms in-process, {accept_on.p50_ms:.2f} ms sandboxed")
    return TemplateSandboxCost(render_off, render_on, accept_off, accept_on, errors)


def _renders(count: int) -> tuple[Latencies, Latencies]:
    from django.conf import settings
    from django.test import override_settings

    from notifications.models import TemplateVariant
    from notifications.services.policy.templates import variant_render

    variant = TemplateVariant.objects.get(template__key="order_created", template__client=None, channel="email", locale="en")
    seconds: dict[str, list[float]] = {"0": [], "2": []}
    overrides = {
        processes: override_settings(NOTIFICATIONS={**settings.NOTIFICATIONS, "TEMPLATE_SANDBOX_PROCESSES": processes})
        for processes in seconds
    }
    for number in range(-WARMUP, count):
        for processes in ("0", "2") if number % 2 == 0 else ("2", "0"):
            with overrides[processes]:
                started = time.perf_counter()
                variant_render(variant, key="order_created", data=DATA, owner="platform")
                if number >= 0:
                    seconds[processes].append(time.perf_counter() - started)
    return Latencies.of(seconds["0"]), Latencies.of(seconds["2"])


def _accepts(count: int) -> tuple[Latencies, Latencies, int]:
    notifications_reset()
    token = api_token()
    seconds: dict[str, list[float]] = {"off": [], "on": []}
    errors = 0
    with (
        web_server(workers=2, name="web-sandbox-off", TEMPLATE_SANDBOX_PROCESSES="0") as (off_url, _),
        web_server(workers=2, name="web-sandbox-on") as (on_url, _),
    ):
        connections = {
            name: http.client.HTTPConnection(urlsplit(url).hostname, urlsplit(url).port, timeout=30)
            for name, url in (("off", off_url), ("on", on_url))
        }
        for number in range(-WARMUP, count):
            for name in ("off", "on") if number % 2 == 0 else ("on", "off"):
                started = time.perf_counter()
                connections[name], ok = accept_post(
                    connections[name], token=token, key=f"sandbox-{name}-{number}", number=number, content=CONTENT
                )
                if number >= 0:
                    seconds[name].append(time.perf_counter() - started)
                    errors += 0 if ok else 1
        for connection in connections.values():
            connection.close()
    queue_purge()
    return Latencies.of(seconds["off"]), Latencies.of(seconds["on"]), errors
