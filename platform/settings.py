"""Django settings: every value is read once, here, from the environment.

With no environment at all the *embedded default* applies: SQLite under ``var/``, an in-process
Dramatiq broker whose worker runs inside the web process, and a local-memory cache. Setting
``DATABASE_URL``, ``BROKER_URL`` and ``REDIS_URL`` switches to PostgreSQL, RabbitMQ and Redis.
Every variable is declared once in notifications/options/ (type, default, bounds, doc): read here
through those declarations, listed in docs/operations.md and .env.example.
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import environ
from csp.constants import NONCE, NONE, SELF
from django.core.exceptions import ImproperlyConfigured

from notifications.options import read_app_options, read_platform_options

from .api_docs import API_DOCS_SETTINGS

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = BASE_DIR / "var"

env = environ.Env()
environ.Env.read_env(BASE_DIR / ".env", overwrite=False)


def _environment_text(variable: str) -> str | None:
    return env.str(variable, default=None)


# Typed and checked by their declarations; a bad value stops start-up naming its variable.
_option = read_platform_options(_environment_text)

DEBUG = _option["DEBUG"]
_DEV_SECRET_KEY = "insecure-embedded-default-only-for-DEBUG"
SECRET_KEY = _option["SECRET_KEY"]
if not SECRET_KEY:
    if not DEBUG:
        raise ImproperlyConfigured(
            "SECRET_KEY is not set. With DEBUG off the platform refuses to start without a secret "
            "key: set SECRET_KEY to a long random string (e.g. `python -c 'import secrets; "
            "print(secrets.token_urlsafe(50))'`)."
        )
    SECRET_KEY = _DEV_SECRET_KEY
ALLOWED_HOSTS = list(_option["ALLOWED_HOSTS"])
CSRF_TRUSTED_ORIGINS = list(_option["CSRF_TRUSTED_ORIGINS"])

INSTALLED_APPS = [
    "django_prometheus",
    "notifications.apps.NotificationsConfig",
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "django_dramatiq",
    "csp",
    "axes",
]

MIDDLEWARE = [
    # Outermost: the request id, and JSON for every /api/ answer whatever raised below.
    "notifications.api.middleware.ApiRequestMiddleware",
    # Preflights and CORS headers of the inbox API, for each client's inbox_allowed_origins.
    "notifications.api.inbox.auth.InboxCorsMiddleware",
    # OpenTelemetry's middleware is inserted right after this one (notifications/tracing.py).
    "notifications.tracing.request_targets.RequestTargetMiddleware",
    "django_prometheus.middleware.PrometheusBeforeMiddleware",
    "django.middleware.security.SecurityMiddleware",
    "csp.middleware.CSPMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "axes.middleware.AxesMiddleware",
    "django_prometheus.middleware.PrometheusAfterMiddleware",
]

ROOT_URLCONF = "platform.urls"
WSGI_APPLICATION = "platform.wsgi.application"
ASGI_APPLICATION = "platform.asgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

# --- Database ---------------------------------------------------------------------------------
DATABASE_URL = _option["DATABASE_URL"] or f"sqlite:///{VAR_DIR / 'db.sqlite3'}"
DATABASES = {"default": env.db_url_config(DATABASE_URL)}
DATABASES["default"]["ENGINE"] = DATABASES["default"]["ENGINE"].replace("django.db.backends.", "django_prometheus.db.backends.")
if "postgresql" in DATABASES["default"]["ENGINE"]:
    DATABASES["default"].setdefault("CONN_MAX_AGE", _option["DATABASE_CONN_MAX_AGE"])
    # Off: Django would send a SELECT 1 before the first statement of every request and every
    # worker message; notifications/connections.py checks only a connection idle for a while.
    DATABASES["default"]["CONN_HEALTH_CHECKS"] = False
    # Only the per-message read is prepared (connections.prepared_cursor asks, prepare=True; Django's
    # statements bind on the client and never are): planned once per connection, not at each bind. A
    # custom plan per bind, which PostgreSQL otherwise keeps when it finds it no dearer, cost twice
    # what running the read did. psycopg prepares nothing while prepare_threshold is None (Django's
    # default); with a threshold no statement reaches, only what asks is prepared.
    _options = DATABASES["default"].setdefault("OPTIONS", {})
    _options.setdefault("prepare_threshold", 2**31)
    _options["options"] = f"{_options.get('options', '')} -c plan_cache_mode=force_generic_plan".strip()
    # Each test run gets a database of its own (make test sets TEST_RUN_ID) so runs never meet.
    DATABASES["default"]["TEST"] = {"NAME": f"test_{DATABASES['default']['NAME']}"}
else:
    # SQLite is only the embedded default, but it serves concurrent requests and the in-process
    # worker's threads. WAL lets readers go on beside the one writer; IMMEDIATE takes the write
    # lock at BEGIN, where the busy timeout makes a second writer wait its turn (a DEFERRED
    # transaction that reads, then writes, fails at once with "database is locked" instead);
    # synchronous=NORMAL is WAL's durable-enough setting (a power cut may lose the last commits).
    DATABASES["default"].setdefault("OPTIONS", {}).update(
        {
            "timeout": 20,
            "transaction_mode": "IMMEDIATE",
            "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL",
        }
    )
    # The fast test tier's database, one per pytest-xdist worker: in memory, named so (the engine
    # is django_prometheus's, which pytest-django would otherwise give a file name).
    DATABASES["default"]["TEST"] = {"NAME": ":memory:"}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# --- Cache (Redis through django-redis, or local memory) ---------------------------------------
REDIS_URL = _option["REDIS_URL"]
CACHE_KEY_PREFIX = _option["CACHE_KEY_PREFIX"]
if REDIS_URL:
    CACHES = {
        "default": {
            "BACKEND": "django_prometheus.cache.backends.redis.RedisCache",
            "LOCATION": REDIS_URL,
            "KEY_PREFIX": CACHE_KEY_PREFIX,
            "OPTIONS": {
                "CLIENT_CLASS": "django_redis.client.DefaultClient",
                "SOCKET_CONNECT_TIMEOUT": 2,
                "SOCKET_TIMEOUT": 2,
            },
        }
    }
else:
    CACHES = {
        "default": {
            "BACKEND": "django.core.cache.backends.locmem.LocMemCache",
            "KEY_PREFIX": CACHE_KEY_PREFIX,
        }
    }

# --- Broker (Dramatiq on RabbitMQ, or in-process) -----------------------------------------------
BROKER_URL = _option["BROKER_URL"]
BROKER_IS_EMBEDDED = BROKER_URL.startswith("memory://")
_DRAMATIQ_MIDDLEWARE = [
    "dramatiq.middleware.AgeLimit",
    "dramatiq.middleware.TimeLimit",
    "dramatiq.middleware.Callbacks",
    "dramatiq.middleware.Retries",
    "dramatiq.middleware.CurrentMessage",
    "notifications.tracing.TraceContextMiddleware",
    "notifications.metrics.WorkerMetricsMiddleware",
    "notifications.connections.WorkerConnectionsMiddleware",
]
if BROKER_IS_EMBEDDED:
    DRAMATIQ_BROKER = {
        "BROKER": "dramatiq.brokers.stub.StubBroker",
        "OPTIONS": {},
        "MIDDLEWARE": _DRAMATIQ_MIDDLEWARE,
    }
elif BROKER_URL.startswith(("amqp://", "amqps://")):
    DRAMATIQ_BROKER = {
        "BROKER": "dramatiq.brokers.rabbitmq.RabbitmqBroker",
        # Without publisher confirms a publish that RabbitMQ never stored looks like a success.
        "OPTIONS": {"url": BROKER_URL, "confirm_delivery": True},
        "MIDDLEWARE": _DRAMATIQ_MIDDLEWARE,
    }
else:
    raise ImproperlyConfigured(
        f"BROKER_URL={BROKER_URL!r} is not understood: use amqp://user:pass@host:5672/vhost for "
        "RabbitMQ, or leave it unset (memory://) for the embedded in-process broker."
    )
DRAMATIQ_AUTODISCOVER_MODULES = ["actors"]

# --- Auth, i18n, static -------------------------------------------------------------------------
AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
]
LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True
STATIC_URL = "static/"
# Relative paths are the checkout's, whatever directory a process starts in.
STATIC_ROOT = str(BASE_DIR / _option["STATIC_ROOT"])
LOGIN_URL = "admin:login"

# --- Security: HTTPS, cookies, Content-Security-Policy, admin login throttling -----------------
# Off by default: the embedded default is plain HTTP on 127.0.0.1. Production turns them on
# (deploy/production.env.example), which `manage.py check --deploy` verifies.
SECURE_SSL_REDIRECT = _option["SECURE_SSL_REDIRECT"]
# Probes and the Prometheus scrape reach the container over plain HTTP, never through the proxy.
SECURE_REDIRECT_EXEMPT = [r"^healthz$", r"^readyz$", r"^metrics$"]
SECURE_HSTS_SECONDS = _option["SECURE_HSTS_SECONDS"]
SECURE_HSTS_INCLUDE_SUBDOMAINS = _option["SECURE_HSTS_INCLUDE_SUBDOMAINS"]
SECURE_HSTS_PRELOAD = _option["SECURE_HSTS_PRELOAD"]
SESSION_COOKIE_SECURE = _option["SESSION_COOKIE_SECURE"]
CSRF_COOKIE_SECURE = _option["CSRF_COOKIE_SECURE"]
# Opt-in, and only behind a proxy that always sets (or strips) the header: whoever can send it
# straight to the app could otherwise claim HTTPS.
_PROXY_SSL_HEADER = _option["SECURE_PROXY_SSL_HEADER"]
if _PROXY_SSL_HEADER and (len(_PROXY_SSL_HEADER) != 2 or not _PROXY_SSL_HEADER[0].startswith("HTTP_")):
    raise ImproperlyConfigured(
        f"SECURE_PROXY_SSL_HEADER={','.join(_PROXY_SSL_HEADER)!r} is not understood: give the request.META name of "
        "the header your proxy sets and its value for HTTPS, e.g. SECURE_PROXY_SSL_HEADER=HTTP_X_FORWARDED_PROTO,https"
    )
SECURE_PROXY_SSL_HEADER = (_PROXY_SSL_HEADER[0], _PROXY_SSL_HEADER[1]) if _PROXY_SSL_HEADER else None

# django-csp 4.x (the dict format; 3.x's CSP_* settings are refused by its system check). Inline
# <script>/<style> only with the per-response nonce (the Swagger UI page, templates/drf_spectacular/);
# never 'unsafe-inline', so inline style attributes are not allowed either. data: images are
# Swagger UI's icons, embedded in its CSS.
CONTENT_SECURITY_POLICY = {
    "DIRECTIVES": {
        "default-src": [SELF],
        "script-src": [SELF, NONCE],
        "style-src": [SELF, NONCE],
        "img-src": [SELF, "data:"],
        "font-src": [SELF],
        "connect-src": [SELF],
        "object-src": [NONE],
        "base-uri": [NONE],
        "form-action": [SELF],
        "frame-ancestors": [NONE],
    },
}

# django-axes: N failed admin logins from one username at one address lock that pair out for the
# cool-off; a success before then resets the count. Attempts are rows in the database (visible in
# the admin; `manage.py axes_reset` unlocks), so every web replica sees the same count.
AUTHENTICATION_BACKENDS = [
    "axes.backends.AxesStandaloneBackend",
    "django.contrib.auth.backends.ModelBackend",
]
AXES_FAILURE_LIMIT = _option["AXES_FAILURE_LIMIT"]
AXES_COOLOFF_TIME = timedelta(seconds=_option["AXES_COOLOFF_SECONDS"])
AXES_LOCKOUT_PARAMETERS = [["username", "ip_address"]]
# Behind API_NUM_PROXIES reverse proxies the client is that many hops back in X-Forwarded-For, as
# for the API's failed-authentication throttle; else every login would share the proxy's address.
AXES_IPWARE_PROXY_COUNT = _option["API_NUM_PROXIES"] or None
AXES_IPWARE_META_PRECEDENCE_ORDER = ("HTTP_X_FORWARDED_FOR", "REMOTE_ADDR") if AXES_IPWARE_PROXY_COUNT else ("REMOTE_ADDR",)
AXES_RESET_ON_SUCCESS = True
AXES_HANDLER = "axes.handlers.database.AxesDatabaseHandler"

# --- Email (the email channel's transport) ------------------------------------------------------
EMAIL_BACKEND = _option["EMAIL_BACKEND"]
EMAIL_FILE_PATH = str(BASE_DIR / _option["EMAIL_FILE_PATH"])
EMAIL_HOST = _option["EMAIL_HOST"]
EMAIL_PORT = _option["EMAIL_PORT"]
EMAIL_HOST_USER = _option["EMAIL_HOST_USER"]
EMAIL_HOST_PASSWORD = _option["EMAIL_HOST_PASSWORD"]
EMAIL_USE_TLS = _option["EMAIL_USE_TLS"]
EMAIL_USE_SSL = _option["EMAIL_USE_SSL"]
EMAIL_TIMEOUT = _option["EMAIL_TIMEOUT"]
DEFAULT_FROM_EMAIL = _option["DEFAULT_FROM_EMAIL"]

# --- REST framework -----------------------------------------------------------------------------
REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": ["notifications.api.auth.ApiClientTokenAuthentication"],
    "DEFAULT_PERMISSION_CLASSES": ["notifications.api.auth.IsApiClient"],
    "DEFAULT_THROTTLE_CLASSES": ["notifications.api.auth.ApiClientRateThrottle"],
    "DEFAULT_THROTTLE_RATES": {
        "api_client": _option["API_THROTTLE_RATE"],
        # Per user of a client, with a user token (the inbox API and its stream's connects).
        "inbox_user": _option["INBOX_USER_THROTTLE_RATE"],
    },
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "EXCEPTION_HANDLER": "notifications.api.exceptions.api_exception_handler",
    "DEFAULT_RENDERER_CLASSES": ["rest_framework.renderers.JSONRenderer"],
    "DEFAULT_PARSER_CLASSES": ["notifications.api.parsers.BoundedJSONParser"],
    "UNAUTHENTICATED_USER": None,
    # Reverse proxies in front of the web process: the client address (failed-authentication
    # throttling) is read that many hops back in X-Forwarded-For. 0: the connection's own peer,
    # so a client cannot pick its address with a header of its own.
    "NUM_PROXIES": _option["API_NUM_PROXIES"],
}
# drf-spectacular's settings: the OpenAPI schema's title, tags and docs pages (platform/api_docs.py).
SPECTACULAR_SETTINGS = API_DOCS_SETTINGS

# --- The notification platform's own options: as the environment gives them (None when unset);
# notifications/conf.py types, defaults and checks them.
NOTIFICATIONS = read_app_options(_environment_text)

# --- Metrics and traces (docs/observability.md) -------------------------------------------------
# The web process serves /metrics itself; workers (all their processes, through prometheus_client's
# multiprocess mode) and the event consumer each serve theirs on a port of their own. 0 = off.
WORKER_METRICS_PORT = _option["WORKER_METRICS_PORT"]
WORKER_METRICS_ADDR = _option["WORKER_METRICS_ADDR"]
# Where worker processes keep their metric files; unset = a fresh temporary directory per start.
WORKER_METRICS_DIR = _option["WORKER_METRICS_DIR"]
CONSUMER_METRICS_PORT = _option["CONSUMER_METRICS_PORT"]
# Standard OpenTelemetry variables; the SDK reads the rest (headers, protocol) itself. With neither
# set, spans are made (the trace id is stored and logged) but nothing is exported.
# Read by platform/asgi.py: the requests a web process holds waiting for a thread (threaded_wsgi.py).
WEB_QUEUE_LIMIT = _option["WEB_QUEUE_LIMIT"]
OTEL_SERVICE_NAME = _option["OTEL_SERVICE_NAME"]
OTEL_EXPORTER_OTLP_ENDPOINT = _option["OTEL_EXPORTER_OTLP_ENDPOINT"]
OTEL_EXPORTER_OTLP_TRACES_ENDPOINT = _option["OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"]
OTEL_TRACES_EXPORTER = _option["OTEL_TRACES_EXPORTER"]

# --- Logging ------------------------------------------------------------------------------------
LOG_LEVEL = _option["LOG_LEVEL"]
LOG_FORMAT = _option["LOG_FORMAT"]
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {
        "json": {"()": "notifications.logging.JsonFormatter"},
        "text": {"format": "%(asctime)s %(levelname)s %(name)s %(message)s"},
    },
    "filters": {"startup_banner": {"()": "notifications.logging.StartupBanner"}},
    "handlers": {
        "console": {"class": "logging.StreamHandler", "formatter": LOG_FORMAT},
    },
    "root": {"handlers": ["console"], "level": LOG_LEVEL},
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
