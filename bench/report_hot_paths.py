"""The sections of bench/RESULTS.md for issue #23's figures: the drain of a mixed HTTP backlog,
16 clients in turn against one, and accept latency at one request at a time."""

from __future__ import annotations

from typing import TYPE_CHECKING

from bench.report_format import met, ms

if TYPE_CHECKING:
    from bench.report import Results

GOALS = "issue #23"


def summary_rows(r: Results) -> list[str]:
    rows: list[str] = []
    if r.mixed_backlog:
        mixed = r.mixed_backlog
        rows.append(
            f"| Drain of a mixed HTTP backlog ({mixed.mixed.what}), rundramatiq --processes 2 ({GOALS}) | "
            f"{mixed.mixed.drain.rate:.0f} msg/s | raw pika {mixed.raw_pika:.0f} msg/s | {mixed.ratio:.2f} | >= 0.50 | "
            f"{met(mixed.ratio >= 0.5)} |"
        )
    if 2 in r.clients:
        run = r.clients[2]
        rows.append(
            f"| Accept, 16 clients in turn against one (gunicorn as deployed, 2 workers; {GOALS}) | "
            f"{run.many.rate:.0f} req/s | one client {run.one.rate:.0f} req/s | {run.many_ratio:.2f} | >= 0.80 | "
            f"{met(run.many_ratio >= 0.8)} |"
        )
        rows.append(
            f"| Accept against /healthz, gunicorn as deployed (2 workers; {GOALS}) | {run.one.rate:.0f} req/s | "
            f"/healthz {run.healthz.rate:.0f} req/s | {run.healthz_ratio:.2f} | >= 0.50 | {met(run.healthz_ratio >= 0.5)} |"
        )
    if r.group_latency:
        group = r.group_latency
        ok = group.on.p50_ms <= group.off.p50_ms and group.on.p99_ms <= group.off.p99_ms
        rows.append(
            f"| Accept p50 / p99 at one request at a time, group commit on ({GOALS}) | "
            f"{ms(group.on.p50_ms)} / {ms(group.on.p99_ms)} ms | off {ms(group.off.p50_ms)} / {ms(group.off.p99_ms)} ms | "
            f"{group.on.p50_ms / group.off.p50_ms:.2f} / {group.on.p99_ms / group.off.p99_ms:.2f} | no worse | {met(ok)} |"
        )
    return rows


def mixed_backlog_section(r: Results) -> list[str]:
    assert r.mixed_backlog is not None
    mixed = r.mixed_backlog
    lines = [
        "## 10. Drain of a backlog accepted over HTTP",
        "",
        "Single `POST /api/v1/notifications` over 16 keep-alive connections to gunicorn as deployed (2 workers), no worker "
        "running (bench/mixed_backlog.py); the delivery messages those accepts published are taken off the queue as they "
        "are and published again, unchanged, once every `rundramatiq --processes 2 --threads 8` process is attached. Timed "
        "from the first send (no-op provider) to the last notification delivered. Baseline: raw pika, as many persistent "
        "messages published with a confirm each and consumed by 2 processes acking each, the mean of a run just before "
        "the mixed backlog's and one just after.",
        "",
        "| Backlog | Notifications | Accepted, req/s | Messages | Ids a message | Drain, msg/s | Ratio to raw pika | "
        "Worker CPU ms/message | PostgreSQL CPU ms/message |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
        f"| Raw pika, 2 consumer processes | {mixed.mixed.drain.count} | - | {mixed.mixed.drain.count} | - | "
        f"{mixed.raw_pika:.0f} | 1.00 | - | - |",
    ]
    for backlog in (mixed.mixed, mixed.one_client_ungrouped):
        drain = backlog.drain
        lines.append(
            f"| {backlog.what} | {drain.count} | {backlog.accept_rate:.0f} | {backlog.messages} | "
            f"{backlog.ids_per_message:.1f} | {drain.rate:.0f} | {drain.rate / mixed.raw_pika:.2f} | "
            f"{drain.cpu_ms_per_message('workers'):.2f} | {drain.cpu_ms_per_message('postgresql'):.2f} |"
        )
    return lines


def clients_section(r: Results) -> list[str]:
    lines = [
        "## 11. Accept with 16 clients in turn",
        "",
        f"gunicorn as deployed (gunicorn.conf.py; `--workers` as listed), `wrk -t{r.options['threads']} "
        f"-c{r.options['connections']}`, {r.options['duration']:g} s of each load after a 3 s warm-up of each, in two rounds "
        "whose order turns (healthz, one, 16; then 16, one, healthz): rates and CPU over both rounds, percentiles the median "
        "of the rounds' (bench/clients_accept.py). One client: every request the bench client's token; 16 clients: each "
        "request the next client's token, round robin (bench/accept.lua). Each load starts from an empty queue; no worker "
        "runs.",
        "",
        "| gunicorn --workers | Load | Req/s | p50 ms | p99 ms | Errors | Web CPU ms/request |",
        "|---:|---|---:|---:|---:|---:|---:|",
    ]
    for workers, run in sorted(r.clients.items()):
        for name, load in (("GET /healthz", run.healthz), ("accept, one client", run.one), ("accept, 16 clients", run.many)):
            lines.append(
                f"| {workers} | {name} | {load.rate:.0f} | {ms(load.p50_ms)} | {ms(load.p99_ms)} | {load.errors} | "
                f"{load.cpu_ms_per_request:.2f} |"
            )
    for workers, run in sorted(r.clients.items()):
        lines += [
            "",
            f"{workers} worker(s): 16 clients / one client **{run.many_ratio:.2f}** (goal >= 0.80); "
            f"accept / healthz **{run.healthz_ratio:.2f}** (goal >= 0.50).",
        ]
    return lines


def group_latency_section(r: Results) -> list[str]:
    assert r.group_latency is not None
    group = r.group_latency
    return [
        "## 12. Accept latency at one request at a time, group commit on and off",
        "",
        "Two gunicorns as deployed (2 workers each), one with `ACCEPT_GROUP_SIZE` at its default "
        f"({group.group_size}), one with `ACCEPT_GROUP_SIZE=1`; a keep-alive connection to each, accepts sent one after "
        "the other, turn about to the two servers, only one ever in flight (bench/group_latency.py). Client-side latency.",
        "",
        "| Group commit | Requests | p50 ms | p95 ms | p99 ms |",
        "|---|---:|---:|---:|---:|",
        f"| on (ACCEPT_GROUP_SIZE={group.group_size}) | {group.on.count} | {ms(group.on.p50_ms)} | {ms(group.on.p95_ms)} | "
        f"{ms(group.on.p99_ms)} |",
        f"| off (ACCEPT_GROUP_SIZE=1) | {group.off.count} | {ms(group.off.p50_ms)} | {ms(group.off.p95_ms)} | "
        f"{ms(group.off.p99_ms)} |",
        "",
        f"Errors: {group.errors}.",
    ]


def sections(r: Results) -> list[str]:
    lines: list[str] = []
    for present, section in (
        (r.mixed_backlog, mixed_backlog_section),
        (r.clients, clients_section),
        (r.group_latency, group_latency_section),
    ):
        if present:
            lines += ["", *section(r)]
    return lines
