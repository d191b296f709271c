"""gunicorn's settings for the web process, read from the working directory (/app in the image);
`manage.py runplatform` (`make run` on the real services) serves with them too, binding its
--addrport instead."""

import glob
import os
import tempfile

bind = "0.0.0.0:8000"
# HTTPS behind the proxy is Django's to judge (SECURE_PROXY_SSL_HEADER, from the environment);
# gunicorn's own forwarded_allow_ips trust stays at its default, the loopback address.
# One worker process per core (WEB_CONCURRENCY overrides), each with threads: the accept path
# waits on PostgreSQL most of the time, and one process never used the second core.
workers = int(os.environ.get("WEB_CONCURRENCY") or 0) or os.cpu_count() or 1
# uvicorn workers serve platform.asgi:application: the live inbox streams as coroutines, the rest
# of the site in WEB_THREADS threads (platform/asgi.py), as gthread's threads served it.
worker_class = "uvicorn_worker.UvicornWorker"
# 16 threads a process (WEB_THREADS overrides): concurrent accepts are written together
# (notifications/services/accept_group.py), so more requests in flight make fewer, larger
# transactions; each thread holds one PostgreSQL connection (CONN_MAX_AGE keeps it).
threads = int(os.environ.get("WEB_THREADS") or 0) or 16
# /metrics must describe every worker, whichever answers the scrape: prometheus_client's
# multiprocess mode, switched on here in the master before any worker imports it. The directory
# is emptied at start so counters begin at zero, as a restarted process's would.
_metrics_dir = os.environ.get("WEB_METRICS_DIR") or tempfile.mkdtemp(prefix="notifications-web-metrics-")
os.makedirs(_metrics_dir, exist_ok=True)
for _stale in glob.glob(os.path.join(_metrics_dir, "*.db")):
    os.remove(_stale)
os.environ["PROMETHEUS_MULTIPROC_DIR"] = _metrics_dir


def child_exit(server: object, worker: object) -> None:
    """A worker that exits takes its live gauges out of the totals."""
    from prometheus_client import multiprocess

    multiprocess.mark_process_dead(worker.pid)  # type: ignore[attr-defined]


# No access log: the app writes one line per request (notifications.request), with its client,
# request id and duration, which gunicorn's line cannot know.
accesslog = None
# JSON from the first line: the master logs before Django (and its LOGGING) is loaded.
logconfig_dict = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"json": {"()": "notifications.logging.JsonFormatter"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "json", "stream": "ext://sys.stdout"}},
    "loggers": {
        "gunicorn.error": {"handlers": ["console"], "level": "INFO", "propagate": False},
    },
}
