# Slim, non-root image running gunicorn with uvicorn workers (platform/asgi.py); the same image runs the worker, sweeper and consumer
# (see deploy/compose.yaml). Run from /app so the project's `platform` package is found first.
FROM python:3.11-slim AS base
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /app
COPY requirements.lock ./
RUN pip install -r requirements.lock
COPY . .
RUN DEBUG=true python manage.py collectstatic --no-input -v0 \
    && useradd --system --uid 10001 --home /app app && mkdir -p /app/var && chown app /app/var
USER app
ENV DEBUG=false STATIC_ROOT=/app/var/static
EXPOSE 8000
# Bind, one threaded process and JSON logs: gunicorn.conf.py.
# uvicorn workers (gunicorn.conf.py): the API and admin, and the inbox's live streams, on port 8000.
CMD ["python", "-m", "gunicorn", "platform.asgi:application"]
