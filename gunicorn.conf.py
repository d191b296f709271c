"""gunicorn's settings for the web process, read from the working directory (/app in the image)."""

bind = "0.0.0.0:8000"
# One process with threads: /metrics then describes the whole container (several gunicorn workers
# would each answer a scrape with their own counters). Scale with replicas.
workers = 1
worker_class = "gthread"
threads = 8
accesslog = "-"
# JSON from the first line: the master logs before Django (and its LOGGING) is loaded.
logconfig_dict = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"json": {"()": "notifications.logging.JsonFormatter"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "json", "stream": "ext://sys.stdout"}},
    "loggers": {
        "gunicorn.error": {"handlers": ["console"], "level": "INFO", "propagate": False},
        "gunicorn.access": {"handlers": ["console"], "level": "INFO", "propagate": False},
    },
}
