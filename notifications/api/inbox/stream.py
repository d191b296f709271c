"""GET /api/v1/inbox/stream: a user's inbox as server-sent events, served by the ASGI server.

An async view: a held connection is a coroutine waiting on its wake-up (inbox/live.py), not a
thread; its body is stream_events.py and its guard stream_guard.py. It opens with a one-use
``?ticket=`` (POST /inbox/stream/tickets), a user token in ``Authorization: Bearer``, or, for
EventSource pages that have no ticket yet, ``?token=`` (this is the one inbox URL that takes a
token). A stream first takes a slot (inbox/slots.py): past INBOX_STREAMS_PER_USER,
INBOX_STREAMS_PER_CLIENT or INBOX_STREAMS_PER_PROCESS it is refused 429 with Retry-After.

platform/asgi.py serves this view with SecurityMiddleware alone (it answers its own errors and
CORS), so that nothing holds a thread for the life of the connection.
"""

from __future__ import annotations

from typing import Any

from django.core.exceptions import DisallowedHost
from django.http import HttpRequest, HttpResponse, HttpResponseBase, JsonResponse, StreamingHttpResponse

from ...conf import get_config
from ...errors import TokenRefused
from ...inbox.live import hub, user_key
from ...inbox.slots import stream_slot_take
from ...services.inbox import InboxUser, inbox_stream_ticket_redeem, inbox_token_verify
from ..exceptions import database_unavailable, error_body
from .auth import MAX_TOKEN_LENGTH, InboxUserRateThrottle, cors_headers, request_token
from .stream_events import stream_events
from .stream_guard import ABORT_SCOPE_KEY, StreamGuard, stream_slot_taken
from .threads import in_thread

MAX_EVENT_ID = 2**63 - 1
# What a stream refused for want of a slot is told to wait: streams of a page last minutes, and
# the widget backs off from there.
SLOTS_RETRY_AFTER_SECONDS = 30


class GuardedStream(StreamingHttpResponse):
    """The stream's response: Django closes it when the request ends (from a thread), which ends
    its guard too, so a stream whose body never ran (its reader left first) gives its slot back."""

    guard: StreamGuard | None = None

    def close(self) -> None:
        super().close()
        if self.guard is not None:
            self.guard.finish_threadsafe()


def _error(status: int, code: str, message: str, origin: str, **extra: Any) -> HttpResponse:
    response = JsonResponse(error_body(code, message, **extra), status=status)
    if status == 401:
        response["WWW-Authenticate"] = 'Bearer realm="inbox"'
    for name, value in cors_headers(origin, None).items():
        response[name] = value
    return response


def _last_event_id(request: HttpRequest) -> int | None:
    raw = request.headers.get("Last-Event-ID") or request.GET.get("last_event_id")
    if raw is None or raw == "":
        return None
    if not (raw.isascii() and raw.isdigit()) or int(raw) > MAX_EVENT_ID:
        raise ValueError(raw)
    return int(raw)


def _stream_user(request: HttpRequest) -> InboxUser | None:
    """The user a stream opens for: by its ticket, else its token (header or ``?token=``); None
    when the request has neither; TokenRefused for one refused."""
    ticket = request.GET.get("ticket", "")[:MAX_TOKEN_LENGTH]
    if ticket:
        return inbox_stream_ticket_redeem(ticket)
    token = request_token(request) or request.GET.get("token", "")[:MAX_TOKEN_LENGTH]
    return inbox_token_verify(token) if token else None


async def inbox_stream(request: HttpRequest) -> HttpResponseBase:
    origin = request.headers.get("Origin", "")
    if request.method == "OPTIONS":
        response = HttpResponse(status=204)
        for name, value in cors_headers(origin, None).items():
            response[name] = value
        return response
    if request.method != "GET":
        refused = _error(405, "method_not_allowed", f'Method "{request.method}" not allowed.', origin)
        refused["Allow"] = "GET, OPTIONS"
        return refused
    try:
        request.get_host()  # ALLOWED_HOSTS, as CommonMiddleware checks it for every other page
    except DisallowedHost:
        return _error(400, "bad_request", "the Host header is not one this platform serves", origin)
    try:
        after = _last_event_id(request)
    except ValueError:
        return _error(400, "invalid", "Last-Event-ID is an event id this stream sent", origin, field="Last-Event-ID")
    try:
        user = await in_thread(_stream_user)(request)
    except TokenRefused as exc:
        return _error(401, "authentication_failed", exc.message, origin, details={"reason": exc.extra.get("reason")})
    except Exception as exc:
        if database_unavailable(exc):  # the cache (a throttle) cannot be reached: it fails open below
            response = _error(503, "unavailable", "the database cannot be reached; try again shortly", origin)
            response["Retry-After"] = "5"
            return response
        raise
    if user is None:
        message = "a stream ticket or an inbox user token is required (?ticket=, Authorization: Bearer, or ?token=)"
        return _error(401, "not_authenticated", message, origin)
    throttle = InboxUserRateThrottle()
    if not await in_thread(throttle.allow_user)(user):
        response = _error(429, "throttled", "too many requests for this user; try again later", origin)
        response["Retry-After"] = str(max(1, int(throttle.wait() or 1)))
        return response
    slot = await stream_slot_taken(in_thread(stream_slot_take)(client_id=user.client.pk, user_id=user.user_id))
    if slot is None:
        message = "too many open streams for this user, client or server; close one or try again later"
        response = _error(429, "too_many_streams", message, origin)
        response["Retry-After"] = str(SLOTS_RETRY_AFTER_SECONDS)
        return response
    options = get_config().inbox
    key = user_key(user.client.pk, user.user_id)
    waiter = hub.subscribe(key)
    guard = StreamGuard(
        user=user,
        key=key,
        waiter=waiter,
        slot=slot,
        abort=getattr(request, "scope", {}).get(ABORT_SCOPE_KEY),
        send_timeout=options.send_timeout_seconds,
    )
    body = stream_events(user, after, guard=guard, heartbeat=options.heartbeat_seconds)
    stream = GuardedStream(body, content_type="text/event-stream; charset=utf-8")
    stream.guard = guard
    stream["Cache-Control"] = "no-cache, no-store"
    stream["X-Accel-Buffering"] = "no"  # a proxy (nginx) must pass each event on at once
    for name, value in cors_headers(origin, user.client).items():
        stream[name] = value
    return stream
