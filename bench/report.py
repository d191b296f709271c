"""bench/RESULTS.md from one run's figures: each with the baseline measured in the same run."""

from __future__ import annotations

import datetime
import statistics
from dataclasses import dataclass, field
from typing import Any

from bench import report_hot_paths
from bench.accept_http import AcceptRun
from bench.clients_accept import ClientsRun
from bench.drain import Drain
from bench.end_to_end import EndToEnd
from bench.group_latency import GroupLatency
from bench.list_scale import GOAL_MS, ScaleResult
from bench.mixed_backlog import MixedBacklog
from bench.noisy import Noisy
from bench.post_office_drain import EmailComparison
from bench.profiling import Profile
from bench.rate_limit import Accuracy
from bench.report_format import met, ms


@dataclass
class Results:
    command: str
    options: dict[str, Any]
    started: datetime.datetime
    machine: list[str]
    load_before: str
    load_after: str = ""
    seconds: float = 0.0
    raw_pika: dict[int, float] = field(default_factory=dict)  # consumers -> messages/s
    drains: dict[int, Drain] = field(default_factory=dict)  # processes -> drain
    accept: dict[int, AcceptRun] = field(default_factory=dict)  # gunicorn workers -> run
    email: EmailComparison | None = None
    end_to_end: EndToEnd | None = None
    scale: ScaleResult | None = None
    accuracy: Accuracy | None = None
    noisy: Noisy | None = None
    profiles: list[Profile] = field(default_factory=list)
    mixed_backlog: MixedBacklog | None = None
    clients: dict[int, ClientsRun] = field(default_factory=dict)  # gunicorn workers -> run
    group_latency: GroupLatency | None = None


def summary(r: Results) -> list[str]:
    rows = [
        "| Goal (issue #11 unless named) | Figure | Baseline, same run | Ratio | Goal | Met |",
        "|---|---:|---:|---:|---|---|",
    ]
    if 1 in r.accept:
        run = r.accept[1]
        rows.append(
            f"| Accept over HTTP (gunicorn as deployed, wrk -t{r.options['threads']} -c{r.options['connections']}) | "
            f"{run.accept.rate:.0f} req/s | /healthz {run.healthz.rate:.0f} req/s | {run.ratio:.2f} | >= 0.50 | {met(run.ratio >= 0.5)} |"
        )
    if 2 in r.drains and 2 in r.raw_pika:
        drain = r.drains[2]
        rows.append(
            f"| Drain of {drain.count} queued, rundramatiq --processes 2, no-op provider | {drain.rate:.0f} msg/s | "
            f"raw pika {r.raw_pika[2]:.0f} msg/s | {drain.rate / r.raw_pika[2]:.2f} | >= 0.35 | {met(drain.rate / r.raw_pika[2] >= 0.35)} |"
        )
    if r.email:
        mine, theirs = _median_rate(r.email.ours), _median_rate(r.email.post_office)
        rows.append(
            f"| Email drain, {r.email.count} emails to an SMTP sink (median of {len(r.email.ours)} rounds) | {mine:.0f} emails/s | "
            f"post_office {theirs:.0f} emails/s | {mine / theirs:.2f} | >= 1.0 | {met(mine >= theirs)} |"
        )
    if r.end_to_end:
        e2e = r.end_to_end
        rows.append(
            f"| End to end p95, accept -> delivered at {e2e.achieved_rate:.0f} req/s | {ms(e2e.delivered.p95_ms)} ms | "
            f"raw pika p95 {ms(e2e.raw_pika.p95_ms)} ms | {e2e.delivered.p95_ms / e2e.raw_pika.p95_ms:.1f}x | < 100 ms | "
            f"{met(e2e.delivered.p95_ms < 100)} |"
        )
    if r.scale:
        worst = max(r.scale.pages, key=lambda page: page.p95_ms)
        rows.append(
            f"| Slowest list page p95 at {r.scale.rows:,} rows ({worst.page.name}) | {ms(worst.p95_ms)} ms | "
            f"/healthz p95 {ms(r.scale.healthz_p95_ms)} ms | {worst.p95_ms / r.scale.healthz_p95_ms:.1f}x | < {GOAL_MS:.0f} ms | "
            f"{met(all(page.ok for page in r.scale.pages))} ({sum(page.ok for page in r.scale.pages)}/{len(r.scale.pages)} pages) |"
        )
    if r.noisy:
        noisy = r.noisy
        rows.append(
            f"| Noisy neighbour: B's webhook p95 during A's {noisy.subscribers:,}-subscriber broadcast (issue #22) | "
            f"{ms(noisy.during.p95_ms)} ms | B alone p95 {ms(noisy.alone.p95_ms)} ms | "
            f"{noisy.during.p95_ms / noisy.alone.p95_ms:.1f}x | < 500 ms | {met(noisy.during.p95_ms < 500)} |"
        )
    return rows + report_hot_paths.summary_rows(r)


def _median_rate(drains: list[Drain]) -> float:
    return statistics.median(drain.rate for drain in drains)


def accept_section(r: Results) -> list[str]:
    lines = [
        "## 1. Accept over HTTP",
        "",
        "`python -m gunicorn platform.wsgi:application` with gunicorn.conf.py (gthread, 16 threads; `--workers` as listed), "
        "DEBUG off, JSON access log, on 127.0.0.1, no worker running. "
        f"`wrk -t{r.options['threads']} -c{r.options['connections']} -d{r.options['duration']:g}s` after a "
        "3 s warm-up of each; the accept is `POST /api/v1/notifications` with a unique Idempotency-Key and body per request "
        "(bench/accept.lua), the baseline `GET /healthz` on the same server just before it. Web CPU: user + system time of "
        "the gunicorn processes over the run.",
        "",
        "| gunicorn --workers | Endpoint | Requests | Req/s | p50 ms | p90 ms | p99 ms | Errors | Web CPU ms/request |",
        "|---:|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for workers, run in sorted(r.accept.items()):
        for name, load in (("GET /healthz", run.healthz), ("POST /api/v1/notifications", run.accept)):
            lines.append(
                f"| {workers} | {name} | {load.requests} | {load.rate:.0f} | {ms(load.p50_ms)} | {ms(load.p90_ms)} | "
                f"{ms(load.p99_ms)} | {load.errors} | {load.cpu_ms_per_request:.2f} |"
            )
    for workers, run in sorted(r.accept.items()):
        lines.append("")
        groups = f"; {run.group_mean:.1f} accepts per group commit" if run.group_mean else ""
        lines.append(f"Accept / healthz with {workers} worker(s): **{run.ratio:.2f}** (goal >= 0.50){groups}.")
    return lines


def drain_section(r: Results) -> list[str]:
    lines = [
        "## 2. Drain of a queued backlog (no-op provider)",
        "",
        f"{r.options['messages']} notifications accepted through the batch service with no worker running; their messages "
        "are purged and published again in one AMQP transaction once every worker process is attached, so start-up is not "
        "timed. Timed from the first send to the last notification delivered. Baseline: raw pika, the same number of "
        "persistent messages published with a confirm each and consumed by as many processes acking each, first publish to "
        "last ack.",
        "",
        "| | Messages | Per second | Ratio to raw pika | Worker CPU ms/message | PostgreSQL CPU ms/message |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for count, rate in sorted(r.raw_pika.items()):
        lines.append(f"| Raw pika, {count} consumer process(es) | {r.options['messages']} | {rate:.0f} | 1.00 | - | - |")
    for processes, drain in sorted(r.drains.items()):
        raw = r.raw_pika.get(processes)
        ratio = f"{drain.rate / raw:.2f}" if raw else "-"
        lines.append(
            f"| `rundramatiq --processes {processes} --threads 8` -> no-op provider -> delivered | {drain.count} | "
            f"{drain.rate:.0f} | {ratio} | {drain.cpu_ms_per_message('workers'):.2f} | {drain.cpu_ms_per_message('postgresql'):.2f} |"
        )
    lines += [
        "",
        "CPU: user + system time of the worker processes, and of the whole PostgreSQL server, from the publish to the last "
        "delivery (bench/cpu.py), per message.",
    ]
    return lines


def email_section(r: Results) -> list[str]:
    assert r.email is not None
    email = r.email
    lines = [
        "## 3. Email drain against django-post_office",
        "",
        f"{email.count} emails queued before the sender starts, sent to a local aiosmtpd sink (bench/smtp_sink.py, its own "
        "process), in alternating rounds. Ours: `rundramatiq --processes 2 --threads 8` with the real email provider "
        "(Django's SMTP backend, a kept connection per thread). post_office 3.x: `send_queued_mail --processes 2` with its "
        "defaults (batches of 100, 5 threads a process, a Log row per email; bench/post_office_settings.py, its own database "
        "on the same PostgreSQL). Both timed from the first message at the sink to the last recorded as sent.",
        "",
        "| Round | Ours emails/s | post_office emails/s | Ours / post_office |",
        "|---:|---:|---:|---:|",
    ]
    for number, (mine, theirs) in enumerate(zip(email.ours, email.post_office, strict=True), start=1):
        lines.append(f"| {number} | {mine.rate:.0f} | {theirs.rate:.0f} | {mine.rate / theirs.rate:.2f} |")
    mine_rate, theirs_rate = _median_rate(email.ours), _median_rate(email.post_office)
    lines.append(f"| median | {mine_rate:.0f} | {theirs_rate:.0f} | **{mine_rate / theirs_rate:.2f}** |")
    lines += [
        "",
        "CPU per email, ms (mean over the rounds): user + system time from /proc (bench/cpu.py). Senders: our worker "
        "processes from the publish of the backlog to the last delivery; post_office's command with its pool processes "
        "(`wait4`, reaped children included) from the first message at the sink to its exit. Services: the whole "
        "PostgreSQL server (the postmaster's tree: backends, also those that ended, WAL writer, checkpointer), RabbitMQ's "
        "beam.smp and redis-server over the same windows, so other work on the machine at the time counts too.",
        "",
        "| | Sender | PostgreSQL | RabbitMQ | Redis | Total |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for name, drains in (("Ours", email.ours), ("post_office", email.post_office)):
        cells = [
            statistics.mean(drain.cpu_ms_per_message(part) for drain in drains)
            for part in ("workers", "postgresql", "rabbitmq", "redis")
        ]
        lines.append(f"| {name} | " + " | ".join(f"{cell:.2f}" for cell in cells) + f" | {sum(cells):.2f} |")
    return lines


def end_to_end_section(r: Results) -> list[str]:
    assert r.end_to_end is not None
    e2e = r.end_to_end
    source = "--e2e-rate" if r.options.get("e2e_rate") else "half the accept rate of section 1 with 1 gunicorn worker"
    return [
        "## 4. End to end: accept -> delivered",
        "",
        f"Open-loop load of `POST /api/v1/notifications` at {e2e.target_rate:.0f} req/s ({source}) for "
        f"{r.options['e2e_duration']:g} s, achieved {e2e.achieved_rate:.0f} req/s, with gunicorn "
        "(as deployed) and `rundramatiq --processes 2 --threads 8` (no-op provider) running; each request's client latency "
        "counts from when it was due. Delivery latency: `delivered_at - created_at` of each row. Baseline: raw pika, "
        "persistent messages published with a confirm each at the same rate, consumed by 2 processes, publish to consume.",
        "",
        "| | Count | p50 ms | p95 ms | p99 ms |",
        "|---|---:|---:|---:|---:|",
        f"| Raw pika publish -> consume | {e2e.raw_pika.count} | {ms(e2e.raw_pika.p50_ms)} | {ms(e2e.raw_pika.p95_ms)} | {ms(e2e.raw_pika.p99_ms)} |",
        f"| Accept over HTTP (client side) | {e2e.accept.count} | {ms(e2e.accept.p50_ms)} | {ms(e2e.accept.p95_ms)} | {ms(e2e.accept.p99_ms)} |",
        f"| Accepted -> delivered (created_at -> delivered_at) | {e2e.delivered.count} | {ms(e2e.delivered.p50_ms)} | "
        f"{ms(e2e.delivered.p95_ms)} | {ms(e2e.delivered.p99_ms)} |",
        "",
        f"Errors: {e2e.errors}; not delivered when measured: {e2e.undelivered}. "
        f"p95 accepted -> delivered: **{ms(e2e.delivered.p95_ms)} ms** (goal < 100 ms), "
        f"{e2e.delivered.p95_ms / e2e.raw_pika.p95_ms:.1f}x raw pika's p95.",
    ]


def scale_section(r: Results) -> list[str]:
    assert r.scale is not None
    scale = r.scale
    lines = [
        "## 5. Lists at scale",
        "",
        f"{scale.rows:,} notifications generated by one `INSERT ... SELECT generate_series(...)` plus `VACUUM (ANALYZE)` in "
        f"{scale.generate_seconds:.0f} s (bench/bulk_notifications.py: 3 clients 50/30/20%, skewed user ids, channels "
        "70/15/10/5%, 90% delivered, 2% failed, created over 30 days). Each first page requested over HTTP from gunicorn "
        f"(as deployed) {r.options['page_requests']} times after 3 warm-ups, the admin's with a superuser logged in through "
        f"the login form; baseline `GET /healthz` the same way: p50 {ms(scale.healthz_p50_ms)} ms, p95 "
        f"{ms(scale.healthz_p95_ms)} ms. In-process: the same page once through Django's test client in the bench process "
        "(after one warm-up), with every query it ran and their time.",
        "",
        "| Page | p50 ms | p95 ms | p50 / healthz p50 | < 150 ms | In-process ms | Queries | Their ms |",
        "|---|---:|---:|---:|---|---:|---:|---:|",
    ]
    for page in scale.pages:
        render = page.render
        detail = f"{ms(render.ms)} | {render.queries} | {ms(render.queries_ms)}" if render else "- | - | -"
        lines.append(
            f"| {page.page.name} | {ms(page.p50_ms)} | {ms(page.p95_ms)} | {page.p50_ms / scale.healthz_p50_ms:.1f} | "
            f"{met(page.ok)} | {detail} |"
        )
    lines += [
        "",
        "Every query of each page (in-process), with the plan (`EXPLAIN (ANALYZE, BUFFERS)`, run again just after) of "
        "those on the notifications table:",
        "",
    ]
    for page in scale.pages:
        lines.append(f"- {page.page.name} (`{page.page.path}`):")
        for plan in page.plans:
            if plan.kind == "other":
                lines.append(f"  - a query on {plan.line}: {plan.in_page_ms:.0f} ms in the page")
            else:
                lines.append(
                    f"  - {plan.kind}: {plan.in_page_ms:.0f} ms in the page, {plan.ms:.1f} ms under EXPLAIN ANALYZE: `{plan.line}`"
                )
    if scale.notes:
        lines += ["", "Why the slow pages are slow (not changed here: platform code):", ""]
        lines += [f"- {note}" for note in scale.notes]
    return lines


def scaling_section(r: Results) -> list[str]:
    lines = [
        "## 6. One process against two",
        "",
        "From sections 1 and 2: gunicorn `--workers 1` against `--workers 2` (16 threads each), rundramatiq `--processes 1` "
        "against `--processes 2` (8 threads each), each with its baseline from the same run.",
        "",
        "| | 1 process | 2 processes | 2 / 1 |",
        "|---|---:|---:|---:|",
    ]
    if 1 in r.accept and 2 in r.accept:
        one, two = r.accept[1], r.accept[2]
        lines.append(
            f"| Accept, req/s | {one.accept.rate:.0f} | {two.accept.rate:.0f} | {two.accept.rate / one.accept.rate:.2f} |"
        )
        lines.append(
            f"| /healthz, req/s (baseline) | {one.healthz.rate:.0f} | {two.healthz.rate:.0f} | {two.healthz.rate / one.healthz.rate:.2f} |"
        )
        lines.append(
            f"| Accept p99, ms | {ms(one.accept.p99_ms)} | {ms(two.accept.p99_ms)} | {two.accept.p99_ms / one.accept.p99_ms:.2f} |"
        )
    if 1 in r.drains and 2 in r.drains:
        one_d, two_d = r.drains[1], r.drains[2]
        lines.append(f"| Drain, messages/s | {one_d.rate:.0f} | {two_d.rate:.0f} | {two_d.rate / one_d.rate:.2f} |")
    if 1 in r.raw_pika and 2 in r.raw_pika:
        lines.append(
            f"| Raw pika consumers, messages/s (baseline) | {r.raw_pika[1]:.0f} | {r.raw_pika[2]:.0f} | {r.raw_pika[2] / r.raw_pika[1]:.2f} |"
        )
    return lines


def accuracy_section(r: Results) -> list[str]:
    assert r.accuracy is not None
    a = r.accuracy
    return [
        "## 7. Rate-limit accuracy",
        "",
        f"Limit email={a.limit}/s; a backlog of {a.sends} notifications ({a.sends / a.limit:.0f}x the limit) drained by 2 "
        "worker processes (no-op provider).",
        "",
        "| | Value | vs limit |",
        "|---|---:|---:|",
        f"| Most sends in any 1 s sliding window | {a.max_window} | {a.max_window / a.limit * 100:.0f}% (allowed: <= 110%) |",
        f"| Average rate, first send to last | {a.average_rate:.1f}/s | {a.average_rate / a.limit * 100:.1f}% (required: >= 90%) |",
    ]


def noisy_section(r: Results) -> list[str]:
    assert r.noisy is not None
    n = r.noisy
    return [
        "## 9. Noisy neighbour: one client's broadcast against another's single notifications",
        "",
        "`rundramatiq --processes 2 --threads 8`, the default rate limits (`webhook=20/s`, one bucket shared by every "
        "client), every webhook posted over HTTP to a local receiver that answers 200 at once (bench/noisy.py). Client B "
        f"accepts one webhook notification every {1 / n.rate:g} s: first alone, then while client A's broadcast to "
        f"{n.subscribers:,} webhook subscribers drains (B starts once A's deliveries have begun, for "
        f"{r.options.get('noisy_duration', 0):g} s). Latency: `delivered_at - created_at` of each of B's rows.",
        "",
        "| Client B's notifications | Count | p50 ms | p95 ms | p99 ms |",
        "|---|---:|---:|---:|---:|",
        f"| Alone | {n.alone.count} | {ms(n.alone.p50_ms)} | {ms(n.alone.p95_ms)} | {ms(n.alone.p99_ms)} |",
        f"| During A's broadcast | {n.during.count} | {ms(n.during.p50_ms)} | {ms(n.during.p95_ms)} | {ms(n.during.p99_ms)} |",
        f"| During A's broadcast, accept -> claimed by a worker | {n.during_claimed.count} | {ms(n.during_claimed.p50_ms)} | "
        f"{ms(n.during_claimed.p95_ms)} | {ms(n.during_claimed.p99_ms)} |",
        "",
        f"A's deliveries while B was measured: {n.a_delivered_during:,}; A's notifications still pending when B's last was "
        f"delivered: {n.a_pending_after:,}; B's not delivered: {n.b_undelivered}. "
        f"p95 during A's broadcast: **{ms(n.during.p95_ms)} ms** (goal < 500 ms).",
    ]


def profile_section(r: Results) -> list[str]:
    lines = [
        "## 8. Profiles (py-spy, `make bench PROFILE=1`)",
        "",
        "Extra runs after the measured ones. `py-spy record --gil --rate 200`: only the thread holding the GIL is "
        "sampled, so the shares are of Python at work (waits on PostgreSQL, Redis and RabbitMQ release the GIL and are "
        "not in them).",
    ]
    for profile in r.profiles:
        lines += ["", f"**{profile.what}** ({profile.samples} samples). Functions the samples were in (self):", ""]
        lines += [
            "| Function | Self |",
            "|---|---:|",
            *[f"| `{frame}` | {share * 100:.1f}% |" for frame, share in profile.top_self],
        ]
        lines += ["", "The platform's own functions, with what they call (inclusive):", "", "| Function | Total |", "|---|---:|"]
        lines += [f"| `{frame}` | {share * 100:.1f}% |" for frame, share in profile.top_ours]
    return lines


def render(r: Results) -> str:
    lines = [
        "# Benchmark results",
        "",
        "Written by `make bench` (bench/run.py); do not edit by hand. This is a small, shared, noisy VM: read the ratios to "
        "the baseline measured in the same run, not the absolute rates.",
        "",
        f"- Command: `{r.command}`",
        f"- Date: {r.started.strftime('%Y-%m-%d %H:%M UTC')}; the whole run took {r.seconds / 60:.1f} min",
        *[f"- Machine: {line}" if index == 0 else f"- {line}" for index, line in enumerate(r.machine)],
        f"- Load average (1, 5, 15 min) before: {r.load_before}; after: {r.load_after}",
        "- Options: " + ", ".join(f"{name}={value}" for name, value in r.options.items()),
        "",
        "## Summary",
        "",
        *summary(r),
    ]
    sections = [
        (r.accept, accept_section),
        (r.drains or r.raw_pika, drain_section),
        (r.email, email_section),
        (r.end_to_end, end_to_end_section),
        (r.scale, scale_section),
        (len(r.accept) > 1 or len(r.drains) > 1, scaling_section),
        (r.accuracy, accuracy_section),
        (r.profiles, profile_section),
        (r.noisy, noisy_section),
    ]
    for present, section in sections:
        if present:
            lines += ["", *section(r)]
    lines += report_hot_paths.sections(r)
    return "\n".join(lines) + "\n"
