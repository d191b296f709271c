"""A minimal Django project running django-post_office, the email drain's comparison
(bench/post_office_drain.py): its own database on the same PostgreSQL server, Django's SMTP backend
to the bench's sink, post_office's defaults otherwise (BATCH_SIZE 100, THREADS_PER_PROCESS 5,
LOG_LEVEL 2: a Log row per email sent, as our platform writes a DeliveryAttempt per send)."""

import environ

env = environ.Env()

SECRET_KEY = "bench-post-office-not-a-secret"
DEBUG = False
USE_TZ = True
TIME_ZONE = "UTC"
INSTALLED_APPS = ["post_office"]
# post_office renders every subject and message as a template, queued with a context or not.
TEMPLATES = [{"BACKEND": "django.template.backends.django.DjangoTemplates", "APP_DIRS": True}]
DATABASES = {"default": env.db_url("POST_OFFICE_DATABASE_URL")}
# As the platform's web and worker processes keep theirs (DATABASE_CONN_MAX_AGE's default).
DATABASES["default"]["CONN_MAX_AGE"] = 60
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

EMAIL_BACKEND = "post_office.EmailBackend"
EMAIL_HOST = "127.0.0.1"
EMAIL_PORT = env.int("EMAIL_PORT")
EMAIL_TIMEOUT = 10
DEFAULT_FROM_EMAIL = "notifications@localhost"
POST_OFFICE = {"BACKENDS": {"default": "django.core.mail.backends.smtp.EmailBackend"}}

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "root": {"handlers": ["console"], "level": "WARNING"},
}
