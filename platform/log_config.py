"""The logging configuration: one console handler, JSON or text, at the level LOG_LEVEL gives
(both read from the environment in settings.py)."""

from __future__ import annotations

from typing import Any


def logging_config(*, level: str, log_format: str) -> dict[str, Any]:
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {
            "json": {"()": "notifications.logging.JsonFormatter"},
            "text": {"format": "%(asctime)s %(levelname)s %(name)s %(message)s"},
        },
        "filters": {"startup_banner": {"()": "notifications.logging.StartupBanner"}},
        "handlers": {
            "console": {"class": "logging.StreamHandler", "formatter": log_format},
        },
        "root": {"handlers": ["console"], "level": level},
        "loggers": {
            # Replace Django's default handlers (a plain-text console in DEBUG), or every django.*
            # line would print twice: once plain, once as JSON through the root.
            "django": {"handlers": ["console"], "level": "INFO", "propagate": False},
            # One line per request, notifications.request's (api/middleware.py): runserver's own
            # request lines are dropped, and Django's "Not Found"/"Bad Request" warnings too (a 5xx's
            # error report, with its traceback, stays).
            "django.server": {"handlers": [], "level": "CRITICAL", "propagate": False},
            "django.request": {"level": "ERROR"},
            "axes.apps": {"filters": ["startup_banner"]},
            "django.db.backends": {"level": "INFO"},
            "pika": {"level": "WARNING"},
            # pika warns on every Channel.Close, including the 404 of the scrape-time queue-size probe
            # for a queue nobody declared yet; whoever owns the channel reports real failures.
            "pika.channel": {"level": "ERROR"},
            # gunicorn's error lines go through the same handler (JSON) once Django is set up in its
            # worker. Its access log is off (gunicorn.conf.py): the request's line is ours.
            "gunicorn.error": {"handlers": ["console"], "level": "INFO", "propagate": False},
        },
    }
