"""The ASGI entry point: the whole site at one address (``manage.py runplatform``, the image's web).

GET /api/v1/inbox/stream, a server-sent event stream held open for as long as the page is, is an
async Django view: a held connection is a coroutine, not a thread. Everything else is the WSGI
application, run in a pool of WEB_THREADS threads (threaded_wsgi.py), as gunicorn's threads ran it: the
API's views, middleware and database access are synchronous, and Django's own ASGI path would
hop between the loop and a thread for each sync middleware of every request. The stream's
handler loads only SecurityMiddleware and enters no thread-sensitive context (which would pin a
thread to each open stream); its view answers its own errors and CORS headers.
"""

from __future__ import annotations

import os
from typing import Any

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "platform.settings")
get_asgi_application()  # django.setup(), before anything below imports a model

from platform.threaded_wsgi import ThreadedWSGI  # noqa: E402

from django.conf import settings  # noqa: E402
from django.core.handlers.asgi import ASGIHandler  # noqa: E402
from django.core.handlers.exception import convert_exception_to_response  # noqa: E402
from django.core.wsgi import get_wsgi_application  # noqa: E402
from django.middleware.security import SecurityMiddleware  # noqa: E402
from opentelemetry import trace  # noqa: E402

from notifications.api.inbox.stream_guard import ABORT_SCOPE_KEY  # noqa: E402
from notifications.tracing.request_targets import asgi_request_span, status_recorded  # noqa: E402

STREAM_PATH = "/api/v1/inbox/stream"


class StreamHandler(ASGIHandler):
    """Django's ASGI handler for the live stream alone: no thread-sensitive context, and of the
    middleware only SecurityMiddleware (HTTPS redirect, HSTS), whose one short sync step at
    connect runs in asgiref's shared thread."""

    def load_middleware(self, is_async: bool = False) -> None:
        self._view_middleware: list[Any] = []
        self._template_response_middleware: list[Any] = []
        self._exception_middleware: list[Any] = []
        view = convert_exception_to_response(self._get_response_async)  # type: ignore[attr-defined]
        self._middleware_chain = convert_exception_to_response(SecurityMiddleware(view))

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        await self.handle(scope, receive, send)


def _with_abort(scope: Any, send: Any) -> Any:
    """``scope`` with a way to drop the connection, where the server's ``send`` gives one.

    A stream whose reader stopped reading is blocked in ``send`` at the transport's write buffer,
    where closing it would wait for the buffer to drain: its guard drops the connection instead,
    with the asyncio transport of the server's send (uvicorn's protocol object holds it; ASGI has
    no abort of its own). On a server without one the guard cancels the stream's task."""
    transport = getattr(getattr(send, "__self__", None), "transport", None)
    abort = getattr(transport, "abort", None)
    return {**scope, ABORT_SCOPE_KEY: abort} if callable(abort) else scope


def _wsgi_application() -> Any:
    application = get_wsgi_application()
    if settings.DEBUG and "django.contrib.staticfiles" in settings.INSTALLED_APPS:
        # What runserver does: the admin's and <ntf-inbox>'s assets straight from the apps.
        from django.contrib.staticfiles.handlers import StaticFilesHandler

        application = StaticFilesHandler(application)
    return application


stream = StreamHandler()
# The threads gunicorn.conf.py gives a process (WEB_THREADS, 16, read as it reads them) and the
# requests it may hold waiting for one.
site = ThreadedWSGI(
    _wsgi_application(),
    threads=int(os.environ.get("WEB_THREADS") or 0) or 16,
    queue_limit=settings.WEB_QUEUE_LIMIT,
    # The API's own limit (Django refuses a larger body with 413 too), not more held before it.
    max_body_bytes=settings.DATA_UPLOAD_MAX_MEMORY_SIZE or 32 * 1024 * 1024,
)


async def application(scope: Any, receive: Any, send: Any) -> None:
    if scope["type"] == "http" and scope["path"] == STREAM_PATH:
        # No Django middleware traces the stream: its span is made here, its token redacted.
        span = asgi_request_span(scope)
        with trace.use_span(span, end_on_exit=True):
            await stream(_with_abort(scope, send), receive, status_recorded(span, send))
    else:
        await site(scope, receive, send)
