"""Django settings: every value is read once, here, from the environment.

With no environment at all the *embedded default* applies: SQLite under ``var/``, an in-process
Dramatiq broker whose worker runs inside the web process, and a local-memory cache. Setting
``DATABASE_URL``, ``BROKER_URL`` and ``REDIS_URL`` switches to PostgreSQL, RabbitMQ and Redis.
``.env.example`` and the README list every variable.
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import environ
from csp.constants import NONCE, NONE, SELF
from django.core.exceptions import ImproperlyConfigured

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = BASE_DIR / "var"

env = environ.Env()
environ.Env.read_env(BASE_DIR / ".env", overwrite=False)

DEBUG = env.bool("DEBUG", default=True)
_DEV_SECRET_KEY = "insecure-embedded-default-only-for-DEBUG"
SECRET_KEY = env.str("SECRET_KEY", default="")
if not SECRET_KEY:
    if not DEBUG:
        raise ImproperlyConfigured(
            "SECRET_KEY is not set. With DEBUG off the platform refuses to start without a secret "
            "key: set SECRET_KEY to a long random string (e.g. `python -c 'import secrets; "
            "print(secrets.token_urlsafe(50))'`)."
        )
    SECRET_KEY = _DEV_SECRET_KEY
ALLOWED_HOSTS = env.list("ALLOWED_HOSTS", default=["localhost", "127.0.0.1", "[::1]", "testserver"])
CSRF_TRUSTED_ORIGINS = env.list("CSRF_TRUSTED_ORIGINS", default=[])

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
    # OpenTelemetry's middleware is inserted right after this one (notifications/tracing.py).
    "notifications.tracing.RequestTargetMiddleware",
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
DATABASE_URL = env.str("DATABASE_URL", default=f"sqlite:///{VAR_DIR / 'db.sqlite3'}")
DATABASES = {"default": env.db_url_config(DATABASE_URL)}
DATABASES["default"]["ENGINE"] = DATABASES["default"]["ENGINE"].replace("django.db.backends.", "django_prometheus.db.backends.")
if "postgresql" in DATABASES["default"]["ENGINE"]:
    DATABASES["default"].setdefault("CONN_MAX_AGE", env.int("DATABASE_CONN_MAX_AGE", default=60))
    DATABASES["default"]["CONN_HEALTH_CHECKS"] = True
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
REDIS_URL = env.str("REDIS_URL", default="")
CACHE_KEY_PREFIX = env.str("CACHE_KEY_PREFIX", default="notifications")
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
BROKER_URL = env.str("BROKER_URL", default="memory://")
BROKER_IS_EMBEDDED = BROKER_URL.startswith("memory://")
_DRAMATIQ_MIDDLEWARE = [
    "dramatiq.middleware.AgeLimit",
    "dramatiq.middleware.TimeLimit",
    "dramatiq.middleware.Callbacks",
    "dramatiq.middleware.Retries",
    "dramatiq.middleware.CurrentMessage",
    "notifications.tracing.TraceContextMiddleware",
    "notifications.metrics.WorkerMetricsMiddleware",
    "notifications.db_connections.WorkerDbConnectionsMiddleware",
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
STATIC_ROOT = env.str("STATIC_ROOT", default=str(VAR_DIR / "static"))
LOGIN_URL = "admin:login"

# --- Security: HTTPS, cookies, Content-Security-Policy, admin login throttling -----------------
# Off by default: the embedded default is plain HTTP on 127.0.0.1. Production turns them on
# (deploy/production.env.example), which `manage.py check --deploy` verifies.
SECURE_SSL_REDIRECT = env.bool("SECURE_SSL_REDIRECT", default=False)
# Probes and the Prometheus scrape reach the container over plain HTTP, never through the proxy.
SECURE_REDIRECT_EXEMPT = [r"^healthz$", r"^readyz$", r"^metrics$"]
SECURE_HSTS_SECONDS = env.int("SECURE_HSTS_SECONDS", default=0)
SECURE_HSTS_INCLUDE_SUBDOMAINS = env.bool("SECURE_HSTS_INCLUDE_SUBDOMAINS", default=False)
SECURE_HSTS_PRELOAD = env.bool("SECURE_HSTS_PRELOAD", default=False)
SESSION_COOKIE_SECURE = env.bool("SESSION_COOKIE_SECURE", default=False)
CSRF_COOKIE_SECURE = env.bool("CSRF_COOKIE_SECURE", default=False)
# Opt-in, and only behind a proxy that always sets (or strips) the header: whoever can send it
# straight to the app could otherwise claim HTTPS.
_PROXY_SSL_HEADER = env.list("SECURE_PROXY_SSL_HEADER", default=[])
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
AXES_FAILURE_LIMIT = env.int("AXES_FAILURE_LIMIT", default=5)
AXES_COOLOFF_TIME = timedelta(seconds=env.int("AXES_COOLOFF_SECONDS", default=900))
AXES_LOCKOUT_PARAMETERS = [["username", "ip_address"]]
# Behind API_NUM_PROXIES reverse proxies the client is that many hops back in X-Forwarded-For, as
# for the API's failed-authentication throttle; else every login would share the proxy's address.
AXES_IPWARE_PROXY_COUNT = env.int("API_NUM_PROXIES", default=0) or None
AXES_IPWARE_META_PRECEDENCE_ORDER = ("HTTP_X_FORWARDED_FOR", "REMOTE_ADDR") if AXES_IPWARE_PROXY_COUNT else ("REMOTE_ADDR",)
AXES_RESET_ON_SUCCESS = True
AXES_HANDLER = "axes.handlers.database.AxesDatabaseHandler"

# --- Email (the email channel's transport) ------------------------------------------------------
EMAIL_BACKEND = env.str("EMAIL_BACKEND", default="django.core.mail.backends.filebased.EmailBackend")
EMAIL_FILE_PATH = env.str("EMAIL_FILE_PATH", default=str(VAR_DIR / "mail"))
EMAIL_HOST = env.str("EMAIL_HOST", default="localhost")
EMAIL_PORT = env.int("EMAIL_PORT", default=25)
EMAIL_HOST_USER = env.str("EMAIL_HOST_USER", default="")
EMAIL_HOST_PASSWORD = env.str("EMAIL_HOST_PASSWORD", default="")
EMAIL_USE_TLS = env.bool("EMAIL_USE_TLS", default=False)
EMAIL_USE_SSL = env.bool("EMAIL_USE_SSL", default=False)
EMAIL_TIMEOUT = env.int("EMAIL_TIMEOUT", default=10)
DEFAULT_FROM_EMAIL = env.str("DEFAULT_FROM_EMAIL", default="notifications@localhost")

# --- REST framework -----------------------------------------------------------------------------
REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": ["notifications.api.auth.ApiClientTokenAuthentication"],
    "DEFAULT_PERMISSION_CLASSES": ["notifications.api.auth.IsApiClient"],
    "DEFAULT_THROTTLE_CLASSES": ["notifications.api.auth.ApiClientRateThrottle"],
    "DEFAULT_THROTTLE_RATES": {"api_client": env.str("API_THROTTLE_RATE", default="6000/min")},
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "EXCEPTION_HANDLER": "notifications.api.exceptions.api_exception_handler",
    "DEFAULT_RENDERER_CLASSES": ["rest_framework.renderers.JSONRenderer"],
    "DEFAULT_PARSER_CLASSES": ["notifications.api.parsers.BoundedJSONParser"],
    "UNAUTHENTICATED_USER": None,
    # Reverse proxies in front of the web process: the client address (failed-authentication
    # throttling) is read that many hops back in X-Forwarded-For. 0: the connection's own peer,
    # so a client cannot pick its address with a header of its own.
    "NUM_PROXIES": env.int("API_NUM_PROXIES", default=0),
}
SPECTACULAR_SETTINGS = {
    "TITLE": "Notification platform API",
    "DESCRIPTION": "Accept, track and cancel email, SMS, push and webhook notifications.\n\n"
    "Every /api/v1/ call but the providers' carries `Authorization: Bearer <token>`, a token an operator makes with "
    '`manage.py create_api_client <name>`. Every error answers `{"error": {"code", "message", "field", '
    '"details"}}`; a 429 or 503 says in Retry-After when to try again. Each request example here can be sent as it '
    "is once what it names exists (the recipient user-42, the template welcome, the topic product-news).",
    "VERSION": "1.0.0",
    "SERVE_INCLUDE_SCHEMA": False,
    "SERVE_PERMISSIONS": ["rest_framework.permissions.AllowAny"],
    "SERVE_AUTHENTICATION": [],
    "COMPONENT_SPLIT_REQUEST": True,
    # Every operation sits under one of these (notifications/api/schema.py api_operation files an
    # operation under the tag its operation_id starts with), shown in this order in /api/docs/.
    "TAGS": [
        {"name": "notifications", "description": "Send one notification (or a batch), follow it, cancel it."},
        {
            "name": "recipients",
            "description": "The people you notify, by your own user_id: their addresses, locale, timezone, quiet hours "
            "and preferences; the one-click unsubscribe link of their emails.",
        },
        {"name": "templates", "description": "Messages written once per channel and locale, rendered with data."},
        {
            "name": "categories",
            "description": "What a notification is about: opt-in or opt-out by default, critical or not, capped per recipient.",
        },
        {"name": "topics", "description": "Named lists of your recipients that a broadcast goes to."},
        {"name": "broadcasts", "description": "One message to every subscriber of a topic, and its progress."},
        {"name": "suppressions", "description": "Addresses not sent to after a hard bounce, a complaint or a STOP."},
        {"name": "client", "description": "Your API client: its status webhook and the secret that signs it."},
        {
            "name": "providers",
            "description": "Delivery status from the providers (Twilio, Mailgun), signed by them; not for API clients.",
        },
        {"name": "health", "description": "Liveness and readiness probes, without a token."},
    ],
    # Swagger UI and ReDoc from our own static files: pinned, and working without the internet.
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    # Named, not hashed: a broadcast's status is another choice set than a notification's.
    "ENUM_NAME_OVERRIDES": {
        "BroadcastStatusEnum": "notifications.models.broadcasts.BroadcastStatus",
        "NotificationStatusEnum": "notifications.models.notifications.Status",
        "ChannelEnum": "notifications.models.content.Channel",
    },
}

# --- The notification platform's own options: read here, unset ones None; the defaults, types and
# checks are in notifications/conf.py.
NOTIFICATIONS = {
    "IDEMPOTENCY_KEY_TTL_SECONDS": env.int("IDEMPOTENCY_KEY_TTL_SECONDS", default=None),
    "MAX_MESSAGE_BYTES": env.int("MAX_MESSAGE_BYTES", default=None),
    "TEMPLATE_RENDER_SECONDS": env.float("TEMPLATE_RENDER_SECONDS", default=None),
    "RATE_LIMITS": env.str("NOTIFICATIONS_RATE_LIMITS", default=None),
    "RATE_LIMIT_HOLD_SECONDS": env.float("RATE_LIMIT_HOLD_SECONDS", default=None),
    "RETRY_BASE_SECONDS": env.float("RETRY_BASE_SECONDS", default=None),
    "RETRY_CAP_SECONDS": env.float("RETRY_CAP_SECONDS", default=None),
    "RETRY_MAX_ATTEMPTS": env.int("RETRY_MAX_ATTEMPTS", default=None),
    "RETRY_POLICIES": env.str("NOTIFICATIONS_RETRY_POLICIES", default=None),
    "SWEEPER_INTERVAL_SECONDS": env.float("SWEEPER_INTERVAL_SECONDS", default=None),
    "QUEUED_TIMEOUT_SECONDS": env.float("QUEUED_TIMEOUT_SECONDS", default=None),
    "SENDING_TIMEOUT_SECONDS": env.float("SENDING_TIMEOUT_SECONDS", default=None),
    "BROKER_DELAY_MAX_SECONDS": env.float("BROKER_DELAY_MAX_SECONDS", default=None),
    "DELIVERY_BATCH_SIZE": env.int("DELIVERY_BATCH_SIZE", default=None),
    "ACCEPT_GROUP_SIZE": env.int("ACCEPT_GROUP_SIZE", default=None),
    "BROADCAST_BATCH_SIZE": env.int("BROADCAST_BATCH_SIZE", default=None),
    "BROADCAST_STALE_SECONDS": env.float("BROADCAST_STALE_SECONDS", default=None),
    "RETENTION_DAYS": env.int("RETENTION_DAYS", default=None),
    "WEBHOOK_ALLOW_HOSTS": env.list("WEBHOOK_ALLOW_HOSTS", default=None),
    "WEBHOOK_TIMEOUT_SECONDS": env.float("WEBHOOK_TIMEOUT_SECONDS", default=None),
    "ADDRESS_LOOKUP_TIMEOUT_SECONDS": env.float("ADDRESS_LOOKUP_TIMEOUT_SECONDS", default=None),
    "WEBHOOK_CONCURRENCY_PER_CLIENT": env.int("WEBHOOK_CONCURRENCY_PER_CLIENT", default=None),
    "STATUS_WEBHOOK_RETRY_POLICY": env.str("STATUS_WEBHOOK_RETRY_POLICY", default=None),
    # A dotted provider class per channel; unset: the channel registry's default.
    "PROVIDERS": {
        "email": env.str("EMAIL_PROVIDER", default=None),
        "sms": env.str("SMS_PROVIDER", default=None),
        "push": env.str("PUSH_PROVIDER", default=None),
        "webhook": env.str("WEBHOOK_PROVIDER", default=None),
    },
    "TWILIO_API_BASE": env.str("TWILIO_API_BASE", default=None),
    "TWILIO_ACCOUNT_SID": env.str("TWILIO_ACCOUNT_SID", default=None),
    "TWILIO_AUTH_TOKEN": env.str("TWILIO_AUTH_TOKEN", default=None),
    "TWILIO_FROM_NUMBER": env.str("TWILIO_FROM_NUMBER", default=None),
    "FCM_API_BASE": env.str("FCM_API_BASE", default=None),
    "FCM_PROJECT_ID": env.str("FCM_PROJECT_ID", default=None),
    "FCM_ACCESS_TOKEN": env.str("FCM_ACCESS_TOKEN", default=None),
    "MAILGUN_WEBHOOK_SIGNING_KEY": env.str("MAILGUN_WEBHOOK_SIGNING_KEY", default=None),
    # Provider failover and its circuit breaker (notifications/services/failover.py, notifications/circuit.py).
    "SMS_FAILOVER_ACCOUNTS": env.str("SMS_FAILOVER_ACCOUNTS", default=None),
    "EMAIL_FAILOVER_ACCOUNTS": env.str("EMAIL_FAILOVER_ACCOUNTS", default=None),
    "PROVIDER_CIRCUIT_FAILURES": env.int("PROVIDER_CIRCUIT_FAILURES", default=None),
    "PROVIDER_CIRCUIT_WINDOW_SECONDS": env.float("PROVIDER_CIRCUIT_WINDOW_SECONDS", default=None),
    "PROVIDER_CIRCUIT_COOLDOWN_SECONDS": env.float("PROVIDER_CIRCUIT_COOLDOWN_SECONDS", default=None),
    "PROVIDER_TIMEOUT_SECONDS": env.float("PROVIDER_TIMEOUT_SECONDS", default=None),
    "EVENTS_API_CLIENT": env.str("EVENTS_API_CLIENT", default=None),
    # The event consumer's RabbitMQ topology and limits (notifications/events/).
    "EVENTS_EXCHANGE": env.str("EVENTS_EXCHANGE", default=None),
    "EVENTS_QUEUE": env.str("EVENTS_QUEUE", default=None),
    "EVENTS_ROUTING_KEY": env.str("EVENTS_ROUTING_KEY", default=None),
    "EVENTS_DLX": env.str("EVENTS_DLX", default=None),
    "EVENTS_DLQ": env.str("EVENTS_DLQ", default=None),
    "EVENTS_PREFETCH": env.int("EVENTS_PREFETCH", default=None),
    "EVENTS_MAX_REDELIVERIES": env.int("EVENTS_MAX_REDELIVERIES", default=None),
    "EVENTS_QUORUM_QUEUES": env.bool("EVENTS_QUORUM_QUEUES", default=None),
    "EVENTS_TRANSIENT_RETRY_SECONDS": env.float("EVENTS_TRANSIENT_RETRY_SECONDS", default=None),
    "EVENTS_RECONNECT_BASE_SECONDS": env.float("EVENTS_RECONNECT_BASE_SECONDS", default=None),
    "EVENTS_RECONNECT_CAP_SECONDS": env.float("EVENTS_RECONNECT_CAP_SECONDS", default=None),
    "EVENTS_DEDUP_TTL_SECONDS": env.int("EVENTS_DEDUP_TTL_SECONDS", default=None),
    # Templates and consent (notifications/services/templates.py, unsubscribe.py).
    "DEFAULT_LOCALE": env.str("DEFAULT_LOCALE", default=None),
    "PUBLIC_BASE_URL": env.str("PUBLIC_BASE_URL", default=None),
    "API_AUTH_FAILURE_RATE": env.str("API_AUTH_FAILURE_RATE", default=None),
    "API_TOKEN_CACHE_SECONDS": env.float("API_TOKEN_CACHE_SECONDS", default=None),
    # Per-client limits; an API client's own values (admin) override them.
    "TOPIC_SUBSCRIBERS_MAX": env.int("TOPIC_SUBSCRIBERS_MAX", default=None),
    "BROADCASTS_PER_HOUR_MAX": env.int("BROADCASTS_PER_HOUR_MAX", default=None),
}

# --- Metrics and traces (docs/observability.md) -------------------------------------------------
# The web process serves /metrics itself; workers (all their processes, through prometheus_client's
# multiprocess mode) and the event consumer each serve theirs on a port of their own. 0 = off.
WORKER_METRICS_PORT = env.int("WORKER_METRICS_PORT", default=9191)
WORKER_METRICS_ADDR = env.str("WORKER_METRICS_ADDR", default="0.0.0.0")
# Where worker processes keep their metric files; unset = a fresh temporary directory per start.
WORKER_METRICS_DIR = env.str("WORKER_METRICS_DIR", default="")
CONSUMER_METRICS_PORT = env.int("CONSUMER_METRICS_PORT", default=9192)
# Standard OpenTelemetry variables; the SDK reads the rest (headers, protocol) itself. With neither
# set, spans are made (the trace id is stored and logged) but nothing is exported.
OTEL_SERVICE_NAME = env.str("OTEL_SERVICE_NAME", default="notifications")
OTEL_EXPORTER_OTLP_ENDPOINT = env.str("OTEL_EXPORTER_OTLP_ENDPOINT", default="")
OTEL_EXPORTER_OTLP_TRACES_ENDPOINT = env.str("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", default="")
OTEL_TRACES_EXPORTER = env.str("OTEL_TRACES_EXPORTER", default="")

# --- Logging ------------------------------------------------------------------------------------
LOG_LEVEL = env.str("LOG_LEVEL", default="INFO")
LOG_FORMAT = env.str("LOG_FORMAT", default="json")
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
