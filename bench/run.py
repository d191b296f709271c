"""Benchmarks of the platform on the real PostgreSQL, RabbitMQ and Redis (``make bench``, issue #11).

Each figure comes with a baseline measured in the same run, and bench/RESULTS.md reports their
ratio (the VM is small, shared and noisy):

1. accept over HTTP (gunicorn as deployed, wrk) against GET /healthz   bench/accept_http.py
2. drain of a queued backlog (rundramatiq, no-op provider) against raw pika   bench/drain.py, raw_pika.py
3. email drain against django-post_office through an SMTP sink         bench/post_office_drain.py
   and of a backlog of single accepts (a message of one id each)        bench/email_singles.py
4. end to end accept -> delivered latency at half the accept rate      bench/end_to_end.py
5. API and admin list pages with 1M notifications, and their plans     bench/list_scale.py
6. one process against two (gunicorn --workers, rundramatiq --processes), from 1 and 2
7. rate-limit accuracy                                                 bench/rate_limit.py
8. a broadcast's fan-out (time, peak memory) and delivery against a drain   bench/broadcast.py
9. the noisy neighbour: B's single webhooks during A's 6,000-subscriber broadcast, and alone   bench/noisy.py
10. the in-app inbox: 2,000 live streams on one ASGI process at 100 notifications/s   bench/inbox.py
11. issue #23: drain of a mixed HTTP backlog, 16 clients in turn, latency with the group commit on
    and off   bench/mixed_backlog.py, clients_accept.py, group_latency.py
12. the admin dashboard's p95 at 1M notifications, against indexed queries        bench/dashboard.py
13. with --profile: py-spy profiles of a worker and of the web process  bench/profiling.py
14. issue #36: the render sandbox's cost, a render and a template accept over HTTP, sandbox on
    against off   bench/template_sandbox.py

The bench makes two databases, a vhost and a Redis key prefix of its own and removes them
afterwards; every process it starts is stopped when its part ends, whatever happened.
"""

from __future__ import annotations

import argparse
import datetime
import importlib.util
import signal
import sys
import time
from pathlib import Path

# Run as `python bench/run.py`: put the repo root first so `platform` is the project package.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import machine, report  # noqa: E402
from bench.harness import LOG_DIR, ROOT, bench_resources, log, require_tool, setup_django  # noqa: E402
from bench.profiling import py_spy  # noqa: E402

PARTS = (
    "drain",
    "rate-limit",
    "accept",
    "email",
    "email-singles",
    "e2e",
    "scale",
    "broadcast",
    "noisy",
    "mixed-backlog",
    "clients",
    "group-latency",
    "inbox",
    "dashboard",
    "template-sandbox",
)


def options() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add = parser.add_argument
    add("--duration", type=float, default=20, help="Seconds of each wrk run (accept and /healthz).")
    add("--threads", type=int, default=2, help="wrk threads.")
    add("--connections", type=int, default=16, help="wrk connections.")
    add("--messages", type=int, default=2000, help="Backlog of the drain comparison with raw pika.")
    add("--emails", type=int, default=2000, help="Emails of each round of the post_office comparison.")
    add("--rounds", type=int, default=3, help="Rounds of each sender in the post_office comparison.")
    add("--e2e-duration", type=float, default=20, help="Seconds of the end-to-end load.")
    add("--e2e-rate", type=float, default=None, help="Requests/s of the end-to-end load (default: half the accept rate).")
    add("--rows", type=int, default=1_000_000, help="Notifications in the table for the list pages.")
    add("--page-requests", type=int, default=20, help="Timed requests of each list page.")
    add("--dashboard-requests", type=int, default=50, help="Timed requests of each dashboard window.")
    add("--limit", type=int, default=50, help="Email sends per second for the rate-limit accuracy run.")
    add("--backlog", type=int, default=600, help="Notifications queued for the rate-limit accuracy run.")
    add("--subscribers", default="10000,100000", help="Comma-separated broadcast sizes whose fan-out is timed.")
    add("--broadcast-deliveries", type=int, default=5000, help="Subscribers of the broadcast whose delivery rate is measured.")
    add("--noisy-subscribers", type=int, default=6000, help="Subscribers of client A's broadcast in the noisy-neighbour part.")
    add("--noisy-rate", type=float, default=4.0, help="Client B's single webhook notifications per second (noisy neighbour).")
    add("--noisy-duration", type=float, default=30, help="Seconds client B sends during A's broadcast (noisy neighbour).")
    add(
        "--sequential",
        type=int,
        default=5000,
        help="Accepts one at a time to each server (group-latency part; a p99 of 5,000 is the 50th slowest, not the 20th).",
    )
    add("--only", default=",".join(PARTS), help=f"Comma-separated parts to run, of: {','.join(PARTS)}.")
    add("--profile", action="store_true", help="Also profile a worker and the web process with py-spy.")
    add("--output", type=Path, default=None, help="Where to write the results (default: bench/RESULTS.md for a full run).")
    args = parser.parse_args()
    unknown = set(args.only.split(",")) - set(PARTS)
    if unknown:
        parser.error(f"unknown parts {sorted(unknown)}; parts are {', '.join(PARTS)}")
    return args


def main() -> None:
    # A plain kill runs the finally blocks too: every process stopped, the databases and vhost dropped.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit("bench: terminated"))
    args = options()
    parts = set(args.only.split(","))
    full = parts == set(PARTS)
    output = args.output or (ROOT / "bench" / "RESULTS.md" if full else LOG_DIR / "RESULTS.md")
    results = report.Results(
        command=_command(),
        options={name: value for name, value in vars(args).items() if name not in ("output", "profile", "only")},
        started=datetime.datetime.now(datetime.UTC),
        machine=machine.facts(),
        load_before=machine.load_average(),
    )
    preflight(args, parts)
    started = time.monotonic()
    with bench_resources():
        setup_django()
        extra = run_parts(args, parts, results)
    results.seconds = time.monotonic() - started
    results.load_after = machine.load_average()
    text = report.render(results) + "".join(f"\n{line}" for line in extra) + ("\n" if extra else "")
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(text)
    print(text)
    log(f"written to {output}; the processes' logs are in {LOG_DIR}")


def preflight(args: argparse.Namespace, parts: set[str]) -> None:
    """Fail now, with what to do, rather than after minutes of the other parts."""
    if "e2e" in parts and "accept" not in parts and not args.e2e_rate:
        raise SystemExit("bench: the end-to-end part runs at half the accept rate: run the accept part too, or give --e2e-rate")
    if parts & {"accept", "e2e", "scale", "clients"} or args.profile:
        require_tool("wrk", "run `make bench` (bench/wrk.sh installs it) or `apt-get install wrk`")
    emails = bool(parts & {"email", "email-singles"})
    for module, needed in (
        ("post_office", emails),
        ("aiosmtpd", emails),
        ("requests", bool(parts & {"scale", "dashboard"})),
    ):
        if needed and importlib.util.find_spec(module) is None:
            raise SystemExit(f"bench: the Python package {module!r} is missing; `make install` installs the dev dependencies")
    if args.profile:
        py_spy()


def _command() -> str:
    """How this run was started, as someone would type it again."""
    given = sys.argv[1:]
    if given in ([], ["--profile"]):
        return "make bench" + (" PROFILE=1" if given else "")
    return " ".join(["python bench/run.py", *given])


def run_parts(args: argparse.Namespace, parts: set[str], results: report.Results) -> list[str]:
    """Run the parts; returns the lines of the sections report.py does not render (broadcasts)."""
    from bench import (
        accept_http,
        broadcast,
        clients_accept,
        dashboard,
        drain,
        email_singles,
        end_to_end,
        group_latency,
        list_scale,
        mixed_backlog,
        noisy,
        post_office_drain,
        profiling,
        rate_limit,
        raw_pika,
    )

    extra: list[str] = []

    if "drain" in parts:
        for consumers in (1, 2):
            log(f"raw pika: {args.messages} persistent messages, {consumers} consumer process(es)")
            results.raw_pika[consumers] = raw_pika.throughput(args.messages, consumers=consumers)
            log(f"raw pika: {results.raw_pika[consumers]:.0f}/s")
        for processes in (2, 1):
            log(f"drain: {args.messages} notifications, rundramatiq --processes {processes}")
            results.drains[processes] = drain.noop_drain(args.messages, processes=processes, tag=f"drain-p{processes}")
            log(f"drain: {results.drains[processes].rate:.0f}/s")
    if "rate-limit" in parts:
        log(f"rate limit: {args.backlog} at email={args.limit}/s")
        results.accuracy = rate_limit.rate_limit_accuracy(args.limit, args.backlog)
    if "accept" in parts:
        for workers in (1, 2):
            log(f"accept over HTTP: gunicorn --workers {workers}, wrk {args.duration:g}s")
            results.accept[workers] = accept_http.accept_http(
                workers=workers, duration=args.duration, threads=args.threads, connections=args.connections
            )
            run = results.accept[workers]
            log(f"accept {run.accept.rate:.0f}/s, healthz {run.healthz.rate:.0f}/s, ratio {run.ratio:.2f}")
    if "email" in parts:
        log(f"email drain: {args.emails} emails, {args.rounds} rounds each, ours and post_office")
        results.email = post_office_drain.email_drain(args.emails, rounds=args.rounds)
    if "email-singles" in parts:
        extra += ["", *email_singles.section(email_singles.email_singles(rounds=args.rounds))]
    if "e2e" in parts:
        rate = args.e2e_rate or results.accept[1].accept.rate / 2
        log(f"end to end: {rate:.0f} req/s for {args.e2e_duration:g}s")
        results.end_to_end = end_to_end.end_to_end(rate=rate, seconds=args.e2e_duration)
        log(f"end to end: p95 {results.end_to_end.delivered.p95_ms:.0f} ms")
    if "scale" in parts:
        results.scale = list_scale.list_scale(rows=args.rows, requests=args.page_requests)
    if args.profile:
        log("profiles: the web process under the accept load, then one worker during a drain")
        results.profiles.append(
            profiling.profile_web(duration=min(args.duration, 10), threads=args.threads, connections=args.connections)
        )
        results.profiles.append(profiling.profile_worker(count=args.messages))
    if "noisy" in parts:
        log(f"noisy neighbour: B's webhooks at {args.noisy_rate:g}/s during A's broadcast to {args.noisy_subscribers:,}")
        results.noisy = noisy.noisy_neighbour(
            subscribers=args.noisy_subscribers, rate=args.noisy_rate, seconds=args.noisy_duration
        )
        log(f"noisy neighbour: B's p95 {results.noisy.during.p95_ms:.0f} ms during, {results.noisy.alone.p95_ms:.0f} ms alone")
    if "mixed-backlog" in parts:
        results.mixed_backlog = mixed_backlog.mixed_backlog(args.messages)
    for workers in (2, 1) if "clients" in parts else ():
        log(f"accept, one client and 16 in turn: gunicorn --workers {workers}, wrk {args.duration:g}s each")
        results.clients[workers] = clients_accept.clients_accept(
            workers=workers, duration=args.duration, threads=args.threads, connections=args.connections
        )
    if "group-latency" in parts:
        log(f"accept latency one request at a time: {args.sequential} accepts each, group commit on and off")
        results.group_latency = group_latency.group_latency(requests=args.sequential)
    if "broadcast" in parts:
        sizes = [int(size) for size in args.subscribers.split(",")]
        extra += ["", *broadcast.section(broadcast.broadcast_bench(sizes=sizes, deliveries=args.broadcast_deliveries))]
    if "inbox" in parts:
        from bench import inbox

        extra += ["", *inbox.inbox_streams().lines(), "", *inbox.front_comparison(duration=args.duration)]
    if "dashboard" in parts:
        extra += ["", *dashboard.section(dashboard.dashboard_bench(rows=args.rows, requests=args.dashboard_requests))]
    if "template-sandbox" in parts:
        from bench import template_sandbox

        log(f"template sandbox: {args.sequential} renders and template accepts each, in-process and sandboxed")
        cost = template_sandbox.template_sandbox_cost(renders=args.sequential, requests=args.sequential)
        extra += ["", *cost.lines()]
    return extra


if __name__ == "__main__":
    main()
