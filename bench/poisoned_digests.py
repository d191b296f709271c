"""Issue 22's isolation check by hand (not a timed test): over HTTP on the platform as deployed
(``manage.py runplatform``: gunicorn, worker, sweeper), client X opens 300 digests whose template
raises at the close and client Y one good digest (opened first, its window ending --y-after
seconds after X's); prints when Y's digest closed relative to its window's end, and what became
of X's. With BROKER_DELAY_MAX_SECONDS=0 every digest is closed by the sweeper.

Needs PostgreSQL, RabbitMQ and Redis named by DATABASE_URL, BROKER_URL and REDIS_URL (a database
and vhost of its own: it migrates the database and starts the platform on them)::

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/demo BROKER_URL=amqp://guest:guest@127.0.0.1:5672/demo \\
    REDIS_URL=redis://127.0.0.1:6379/0 .venv/bin/python -m bench.poisoned_digests --port 18055
"""

from __future__ import annotations

import argparse
import math
import os
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import requests

ROOT = Path(__file__).resolve().parent.parent
PY = sys.executable
# Passes the store-time bounds (a literal ljust:"b" would not); raises once a digest has two members.
POISONED = "{{ count }} updates{% if count > 1 %}{{ count|divisibleby:0 }}{% endif %}"
GOOD = "{{ count }} updates:{% for item in items %} {{ item.n }};{% endfor %}"


def manage(*args: str) -> str:
    return subprocess.run([PY, "manage.py", *args], cwd=ROOT, check=True, capture_output=True, text=True).stdout


def api_session(token: str) -> requests.Session:
    session = requests.Session()
    session.headers["Authorization"] = f"Bearer {token}"
    return session


def put_template(session: requests.Session, base: str, body: str) -> None:
    variants = [{"channel": "email", "locale": "en", "subject": "{{ count }} new", "body": body}]
    response = session.put(f"{base}/api/v1/templates/activity", json={"variants": variants}, timeout=30)
    assert response.status_code in (200, 201), response.text


def post_member(session: requests.Session, base: str, *, user_id: str, key: str, n: int, closes_at: float) -> dict[str, Any]:
    """A digest member; the window, for the request that opens the digest, ends at ``closes_at``."""
    window = max(1, math.ceil(closes_at - time.time()))
    body = {
        "user_id": user_id,
        "to": f"{user_id}@example.com",
        "template": "activity",
        "data": {"n": n},
        "digest": {"key": key, "window_seconds": window, "max_items": 100},
    }
    response = session.post(f"{base}/api/v1/notifications", json=body, timeout=30)
    assert response.status_code == 202, response.text
    return dict(response.json())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=18055)
    parser.add_argument("--digests", type=int, default=300, help="client X's poisoned digests")
    parser.add_argument("--lead", type=float, default=45.0, help="seconds from now to the end of X's windows")
    parser.add_argument("--y-after", type=float, default=3.0, help="seconds Y's window ends after X's (X's are due first)")
    args = parser.parse_args()
    base = f"http://127.0.0.1:{args.port}"
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "platform.settings")
    os.environ.setdefault("EMAIL_FILE_PATH", "/tmp/poisoned-digests-mail")
    manage("migrate", "--no-input")
    tokens = {name: manage("create_api_client", f"demo-{name}-{os.getpid()}").strip().splitlines()[-1] for name in "XY"}
    platform = subprocess.Popen(
        [PY, "manage.py", "runplatform", "--addrport", f"127.0.0.1:{args.port}"], cwd=ROOT, start_new_session=True
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                if requests.get(f"{base}/healthz", timeout=2).status_code == 200:
                    break
            except requests.RequestException:
                pass
            assert time.monotonic() < deadline, "the platform did not come up"
            time.sleep(0.5)
        x, y = api_session(tokens["X"]), api_session(tokens["Y"])
        put_template(x, base, POISONED)
        put_template(y, base, GOOD)
        closes_at = time.time() + args.lead
        # Y's digest opens first (the oldest, so the last a newest-first sweep would reach).
        y_member = post_member(y, base, user_id="y1", key="activity", n=1, closes_at=closes_at + args.y_after)

        def poison(n: int) -> None:
            for item in range(2):
                post_member(x, base, user_id="x1", key=f"k{n}", n=item, closes_at=closes_at)

        started = time.monotonic()
        with ThreadPoolExecutor(max_workers=8) as pool:
            list(pool.map(poison, range(args.digests)))
        print(f"posted {2 * args.digests} members of X's {args.digests} digests in {time.monotonic() - started:.1f} s")
        assert time.time() < closes_at - 2, "the posts took longer than --lead: raise it"
        report(y_member["id"], closes_at=closes_at, digests=args.digests)
    finally:
        os.killpg(platform.pid, signal.SIGTERM)
        platform.wait(timeout=60)


def report(y_member_id: str, *, closes_at: float, digests: int) -> None:
    import django

    django.setup()
    from notifications.models import DeadLetter, Digest, Notification

    y_digest_id = Notification.objects.get(pk=y_member_id).digest_id
    deadline = time.time() + 90
    while time.time() < deadline:
        y = Digest.objects.select_related("notification").get(pk=y_digest_id)
        x_done = Digest.objects.exclude(pk=y_digest_id).filter(status="failed").count()
        if y.closed_at is not None and x_done == digests:
            break
        time.sleep(0.2)
    y = Digest.objects.select_related("notification").get(pk=y_digest_id)
    xs = Digest.objects.exclude(pk=y_digest_id)
    if y.closed_at is None:
        print(f"Y's digest is still {y.status} {time.time() - y.closes_at.timestamp():.0f} s after its window's end")
    else:
        print(f"Y's digest {y.status}: closed {(y.closed_at - y.closes_at).total_seconds():+.2f} s after its window's end")
    if y.notification is not None and y.notification.delivered_at is not None:
        print(
            f"Y's notification {y.notification.status}, {(y.notification.delivered_at - y.closes_at).total_seconds():+.2f} s after"
        )
    last = max((d.closed_at for d in xs if d.closed_at is not None), default=None)
    print(
        f"X's digests: {xs.filter(status='failed').count()} failed, {xs.filter(status='open').count()} open of {xs.count()}, "
        f"dead letters {DeadLetter.objects.filter(notification__digest__in=xs).count()}, "
        f"last closed {(last - y.closes_at).total_seconds() if last else float('nan'):+.2f} s after the window's end"
    )
    print(f"X's windows ended {closes_at - y.closes_at.timestamp():+.2f} s from Y's")


if __name__ == "__main__":
    main()
