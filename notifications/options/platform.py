"""The Django project's options: read by platform/settings.py into Django's own settings, and
the web server's, read by gunicorn.conf.py before Django starts."""

from __future__ import annotations

from .option import THROTTLE_RATE, THROTTLE_RATE_FORM, Option, group

PLATFORM_OPTIONS: tuple[Option, ...] = (
    *group(
        "Core",
        Option("DEBUG", bool, True, "with false, SECRET_KEY is required and start-up stops without it"),
        Option(
            "SECRET_KEY",
            str,
            "",
            "Django's secret (signs sessions and unsubscribe links): a long random string",
            secret=True,
            shown_default="a development key, with DEBUG only",
        ),
        Option(
            "ALLOWED_HOSTS",
            tuple,
            ("localhost", "127.0.0.1", "[::1]", "testserver"),
            "host names the web process answers to, comma-separated",
        ),
        Option(
            "CSRF_TRUSTED_ORIGINS", tuple, (), "origins the admin's forms may be posted from, e.g. https://notify.example.com"
        ),
        Option("STATIC_ROOT", str, "var/static", "where `collectstatic` puts the admin's assets (served by WhiteNoise)"),
    ),
    *group(
        "Services",
        Option(
            "DATABASE_URL",
            str,
            "",
            "`postgres://user:pass@host:5432/db` (psycopg 3); unset: the embedded SQLite file",
            shown_default="`sqlite:///var/db.sqlite3`",
            example="postgres://postgres@127.0.0.1:5432/notifications",
        ),
        Option(
            "DATABASE_CONN_MAX_AGE",
            int,
            60,
            "seconds a PostgreSQL connection is kept between requests (0: closed after each)",
            minimum=0,
        ),
        Option(
            "BROKER_URL",
            str,
            "memory://",
            "`amqp://user:pass@host:5672/vhost` for RabbitMQ (publisher confirms on); `memory://`: the in-process broker",
            example="amqp://guest:guest@127.0.0.1:5672/%2F",
        ),
        Option(
            "REDIS_URL",
            str,
            "",
            "`redis://host:6379/0`: cache, throttles, rate limits and circuits shared by every process",
            shown_default="local memory",
            example="redis://127.0.0.1:6379/0",
        ),
        Option("CACHE_KEY_PREFIX", str, "notifications", "prefix of every Redis key"),
    ),
    *group(
        "HTTPS, the admin login and the API's throttles",
        Option(
            "SECURE_PROXY_SSL_HEADER",
            tuple,
            (),
            "`HTTP_X_FORWARDED_PROTO,https`: trust this header from the TLS proxy (only behind one that always sets it)",
        ),
        Option("SECURE_SSL_REDIRECT", bool, False, "redirect plain HTTP to HTTPS (`/healthz`, `/readyz`, `/metrics` exempt)"),
        Option("SECURE_HSTS_SECONDS", int, 0, "max-age of the `Strict-Transport-Security` header on HTTPS answers", minimum=0),
        Option("SECURE_HSTS_INCLUDE_SUBDOMAINS", bool, False, "HSTS covers the subdomains too"),
        Option("SECURE_HSTS_PRELOAD", bool, False, "HSTS asks to be preloaded by browsers"),
        Option("SESSION_COOKIE_SECURE", bool, False, "the admin's session cookie over HTTPS only"),
        Option("CSRF_COOKIE_SECURE", bool, False, "the admin's CSRF cookie over HTTPS only"),
        Option(
            "AXES_FAILURE_LIMIT",
            int,
            5,
            "failed admin logins per username and address before that pair is locked out",
            minimum=1,
        ),
        Option("AXES_COOLOFF_SECONDS", int, 900, "how long an admin login lock-out lasts", minimum=1),
        Option(
            "API_NUM_PROXIES",
            int,
            0,
            "reverse proxies in front that append to `X-Forwarded-For` (`deploy/` sets 1); 0: the connection's peer",
            minimum=0,
        ),
        Option(
            "API_THROTTLE_RATE",
            str,
            "6000/min",
            "requests per API client and window, counted for the whole web tier",
            pattern=THROTTLE_RATE,
            form=THROTTLE_RATE_FORM,
        ),
        Option(
            "INBOX_USER_THROTTLE_RATE",
            str,
            "600/min",
            "requests per inbox user (a user token) and window: the inbox API and its stream's connects",
            pattern=THROTTLE_RATE,
            form=THROTTLE_RATE_FORM,
        ),
        Option(
            "WEB_QUEUE_LIMIT",
            int,
            256,
            "requests a web process holds waiting for one of its WEB_THREADS (each body at most Django's "
            "DATA_UPLOAD_MAX_MEMORY_SIZE, 2.5 MB); past them a request is answered 503 with Retry-After",
            minimum=0,
        ),
    ),
    *group(
        "Email transport (the email channel's primary account)",
        Option(
            "EMAIL_BACKEND",
            str,
            "django.core.mail.backends.filebased.EmailBackend",
            "Django's email backend; `django.core.mail.backends.smtp.EmailBackend` in production",
        ),
        Option("EMAIL_FILE_PATH", str, "var/mail", "where the file backend writes each email"),
        Option("EMAIL_HOST", str, "localhost", "the SMTP relay"),
        Option("EMAIL_PORT", int, 25, "its port", minimum=1, maximum=65535),
        Option("EMAIL_HOST_USER", str, "", "its login (also the account's name in metrics and attempts)"),
        Option("EMAIL_HOST_PASSWORD", str, "", "its password", secret=True),
        Option("EMAIL_USE_TLS", bool, False, "STARTTLS on the connection"),
        Option("EMAIL_USE_SSL", bool, False, "implicit TLS (port 465)"),
        Option("EMAIL_TIMEOUT", int, 10, "seconds an SMTP operation may take", minimum=1),
        Option("DEFAULT_FROM_EMAIL", str, "notifications@localhost", "the sender; its domain ends every Message-ID"),
    ),
    *group(
        "Metrics, traces and logs (docs/observability.md)",
        Option(
            "WORKER_METRICS_PORT",
            int,
            9191,
            "where `rundramatiq` serves its processes' metrics (0: off)",
            minimum=0,
            maximum=65535,
        ),
        Option("WORKER_METRICS_ADDR", str, "0.0.0.0", "the address it binds"),
        Option(
            "WORKER_METRICS_DIR",
            str,
            "",
            "where the worker processes share their metric files",
            shown_default="a fresh temporary directory",
        ),
        Option(
            "CONSUMER_METRICS_PORT",
            int,
            9192,
            "where `consume_events` serves its metrics (0: off)",
            minimum=0,
            maximum=65535,
        ),
        Option("OTEL_SERVICE_NAME", str, "notifications", "the service name on every span"),
        Option("OTEL_EXPORTER_OTLP_ENDPOINT", str, "", "OTLP endpoint; with no endpoint and no exporter, nothing is exported"),
        Option("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", str, "", "OTLP endpoint of the traces, when not the one above"),
        Option("OTEL_TRACES_EXPORTER", str, "", "`otlp`, `console` or `none`; unset: `otlp` when an endpoint is set"),
        Option(
            "LOG_LEVEL",
            str,
            "INFO",
            "the root logger's level",
            pattern="DEBUG|INFO|WARNING|ERROR|CRITICAL",
            form="DEBUG, INFO, WARNING, ERROR or CRITICAL",
        ),
        Option(
            "LOG_FORMAT",
            str,
            "json",
            "`json` (lines carrying `otelTraceID` and `request_id`) or `text`",
            pattern="json|text",
            form="json or text",
        ),
    ),
)

# Read by gunicorn.conf.py itself (gunicorn loads it before Django), with these defaults.
GUNICORN_OPTIONS: tuple[Option, ...] = group(
    "Web server (gunicorn.conf.py)",
    Option(
        "WEB_CONCURRENCY",
        int,
        0,
        "gunicorn worker processes (0: one per CPU)",
        minimum=0,
        shown_default="0 (the CPU count)",
    ),
    Option("WEB_THREADS", int, 16, "threads per process, each holding one PostgreSQL connection", minimum=1),
    Option(
        "WEB_METRICS_DIR",
        str,
        "",
        "where the processes keep their metric files, so `/metrics` sums them all",
        shown_default="a fresh temporary directory",
    ),
)
