"""GET /api/v1/inbox/stream: a user's inbox as server-sent events, served by the ASGI server.

An async view: a held connection is a coroutine waiting on its wake-up (inbox/live.py), not a
thread. It sends ``item.created``, ``item.updated`` and ``counts`` events, each with ``id:`` (the
event's row id), and a heartbeat comment every INBOX_STREAM_HEARTBEAT_SECONDS. A wake-up that
carries the events following the last id sent is sent as it is; any other reads the user's events
after that id from the database, where they are numbered in commit order (inbox/live.py). So a
reconnect with ``Last-Event-ID`` within the resume window (INBOX_EVENT_RETENTION_SECONDS) gets
exactly what it missed, nothing twice. Without ``Last-Event-ID`` the stream starts with the
user's counts, under the id of their latest event. The database reads run in the loop's shared
thread pool (``thread_sensitive=False``) for a moment each, never held for the connection.

platform/asgi.py serves this view with SecurityMiddleware alone (it answers its own errors and
CORS), so that nothing holds a thread for the life of the connection.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from typing import Any

from asgiref.sync import sync_to_async
from django.core.exceptions import DisallowedHost
from django.db import close_old_connections
from django.http import HttpRequest, HttpResponse, HttpResponseBase, JsonResponse, StreamingHttpResponse

from ...conf import get_config
from ...errors import TokenRefused
from ...inbox.live import Told, hub, user_key
from ...models import InboxEvent, InboxTokenGate
from ...selectors.inbox import inbox_counts_and_last_event, inbox_events_after
from ...services.inbox import InboxUser, inbox_token_verify
from ..exceptions import database_unavailable, error_body
from .auth import InboxUserRateThrottle, cors_headers, request_token

# Events one read sends before it reads again (a long absence is caught up in pages).
READ_PAGE = 500
# What EventSource waits before it reconnects after the stream ends.
RETRY_MILLISECONDS = 2000
MAX_EVENT_ID = 2**63 - 1
READ_EVERY_HEARTBEATS = 4


def _in_thread(function: Any) -> Any:
    """Run a short database read in the loop's shared pool, on a connection of that thread."""

    def run(*args: Any, **kwargs: Any) -> Any:
        close_old_connections()
        return function(*args, **kwargs)

    return sync_to_async(run, thread_sensitive=False)


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
    token = request_token(request)
    if not token:
        return _error(401, "not_authenticated", "an inbox user token is required (Authorization: Bearer, or ?token=)", origin)
    try:
        user = await _in_thread(inbox_token_verify)(token)
    except TokenRefused as exc:
        return _error(401, "authentication_failed", exc.message, origin, details={"reason": exc.extra.get("reason")})
    except Exception as exc:
        if database_unavailable(exc):  # the cache (a throttle) cannot be reached: it fails open below
            response = _error(503, "unavailable", "the database cannot be reached; try again shortly", origin)
            response["Retry-After"] = "5"
            return response
        raise
    throttle = InboxUserRateThrottle()
    if not await _in_thread(throttle.allow_user)(user):
        response = _error(429, "throttled", "too many requests for this user; try again later", origin)
        response["Retry-After"] = str(max(1, int(throttle.wait() or 1)))
        return response
    stream = StreamingHttpResponse(_events(user, after), content_type="text/event-stream; charset=utf-8")
    stream["Cache-Control"] = "no-cache, no-store"
    stream["X-Accel-Buffering"] = "no"  # a proxy (nginx) must pass each event on at once
    for name, value in cors_headers(origin, user.client).items():
        stream[name] = value
    return stream


def _event(event_id: int, event_type: str, data: dict[str, Any]) -> str:
    return f"id: {event_id}\nevent: {event_type}\ndata: {json.dumps(data, separators=(',', ':'))}\n\n"


def _start(user: InboxUser) -> tuple[int, dict[str, int]]:
    """Where a new stream starts: the user's latest event id, and their counts now (one row)."""
    counts, last = inbox_counts_and_last_event(client_id=user.client.pk, user_id=user.user_id)
    return last, counts.as_dict()


def _told(told: list[Told | None], last: int) -> list[tuple[int, str, Any]] | None:
    """The events the wake-ups carried that follow ``last`` without a gap; None when one carried
    nothing or does not follow (then the stream reads the database)."""
    events: list[tuple[int, str, Any]] = []
    for change in told:
        if change is None or not change.events:
            return None
        if change.events[-1][0] <= last:
            continue  # sent already (a read caught it up)
        if change.previous != last:
            return None
        events += change.events
        last = change.events[-1][0]
    return events


def _read(user: InboxUser, after: int, *, check_token: bool) -> tuple[list[InboxEvent], bool]:
    """The user's events after ``after``, and whether their token still holds: checked when the
    wake-up said their tokens were revoked (one query more), else taken to hold."""
    client_id = user.client.pk
    if (
        check_token
        and InboxTokenGate.objects.filter(client_id=client_id, user_id=user.user_id, not_before__gt=user.issued_at).exists()
    ):
        return [], False
    return inbox_events_after(client_id=client_id, user_id=user.user_id, after=after, limit=READ_PAGE), True


async def _events(user: InboxUser, after: int | None) -> AsyncIterator[str]:
    key = user_key(user.client.pk, user.user_id)
    waiter = hub.subscribe(key)
    waiter.revoked = True  # the first read checks the token: a revocation since it was verified was not heard
    heartbeat = get_config().inbox.heartbeat_seconds
    try:
        yield f"retry: {RETRY_MILLISECONDS}\n\n"
        if after is None:
            last, counts = await _in_thread(_start)(user)
            yield _event(last, "counts", counts)
        else:
            last = after
        read = True  # a new stream reads what came since its start
        heartbeats = 0
        while True:
            waiter.event.clear()  # before the read: a wake-up during it is not lost
            check_token, waiter.revoked = waiter.revoked, False
            told, waiter.told = waiter.told, []
            carried = None if (read or check_token) else _told(told, last)
            if carried is not None:
                events = carried
            else:
                rows, valid = await _in_thread(_read)(user, last, check_token=check_token)
                if not valid:
                    return  # revoked: EventSource reconnects and is answered 401
                events = [(row.id, row.type, row.data) for row in rows]
            read = carried is None and len(events) == READ_PAGE
            for event_id, event_type, data in events:
                yield _event(event_id, event_type, data)
                last = event_id
            if read:
                continue
            left = user.expires_at.timestamp() - time.time()
            if left <= 0:
                return  # expired: the reconnect is answered 401, and the page gets a new token
            try:
                await asyncio.wait_for(waiter.event.wait(), timeout=min(heartbeat, left))
            except TimeoutError:
                yield ": heartbeat\n\n"
                heartbeats += 1
                # Now and then a quiet stream reads anyway: a wake-up whose publish failed (Redis
                # down for a moment) is caught up within a minute, not at the user's next change.
                read = heartbeats % READ_EVERY_HEARTBEATS == 0
    finally:
        hub.unsubscribe(key, waiter)


def stream_schema_hook(result: dict[str, Any], generator: Any, request: Any, public: bool) -> dict[str, Any]:
    """drf-spectacular's postprocessing hook: the stream is a plain async view, which the schema
    generator does not walk, so its operation is written here."""
    error = {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}
    retry_after = {"Retry-After": {"required": True, "schema": {"type": "integer"}, "description": "Seconds to wait."}}
    result.setdefault("paths", {})["/api/v1/inbox/stream"] = {
        "get": {
            "operationId": "inbox_stream",
            "summary": "Follow the user's inbox live",
            "description": "Server-sent events (text/event-stream) for the user of the token: item.created and "
            "item.updated (data: the item) and counts (data: unseen, unread, total), each with id:; a heartbeat comment "
            "every INBOX_STREAM_HEARTBEAT_SECONDS (15). Reconnect with Last-Event-ID (EventSource does) to get "
            "exactly what was missed within INBOX_EVENT_RETENTION_SECONDS. Without it the stream starts with a counts "
            "event. The token goes in ?token= (EventSource cannot set headers) or Authorization: Bearer. The stream "
            "ends when the token expires or is revoked.",
            "tags": ["inbox"],
            "security": [{"inboxUserToken": []}],
            "parameters": [
                {"name": "token", "in": "query", "required": False, "schema": {"type": "string", "maxLength": 2048}},
                {
                    "name": "Last-Event-ID",
                    "in": "header",
                    "required": False,
                    "schema": {"type": "string", "pattern": "^[0-9]{1,19}$"},
                    "description": "The id of the last event received; the stream sends the ones after it.",
                },
            ],
            "responses": {
                "200": {"description": "The event stream.", "content": {"text/event-stream": {"schema": {"type": "string"}}}},
                "400": {"description": "Last-Event-ID is not an event id.", "content": error},
                "401": {"description": "No inbox user token, or one expired, revoked or not a user token.", "content": error},
                "429": {
                    "description": "Over the user's request rate (INBOX_USER_THROTTLE_RATE); try again after Retry-After.",
                    "content": error,
                    "headers": retry_after,
                },
                "503": {
                    "description": "PostgreSQL cannot be reached; try again after Retry-After.",
                    "content": error,
                    "headers": retry_after,
                },
            },
        }
    }
    return result
