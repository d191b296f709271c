"""The OpenAPI operation of GET /api/v1/inbox/stream, written by hand: the stream is a plain async
view, which drf-spectacular's generator does not walk."""

from __future__ import annotations

from typing import Any


def stream_schema_hook(result: dict[str, Any], generator: Any, request: Any, public: bool) -> dict[str, Any]:
    """drf-spectacular's postprocessing hook: the stream is a plain async view, which the schema
    generator does not walk, so its operation is written here."""
    error = {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}
    retry_after = {"Retry-After": {"required": True, "schema": {"type": "integer"}, "description": "Seconds to wait."}}
    result.setdefault("paths", {})["/api/v1/inbox/stream"] = {
        "get": {
            "operationId": "inbox_stream",
            "summary": "Follow the user's inbox live",
            "description": "Server-sent events (text/event-stream) for the user of the ticket or token: item.created "
            "and item.updated (data: the item) and counts (data: unseen, unread, total), each with id:; a heartbeat "
            "comment every INBOX_STREAM_HEARTBEAT_SECONDS (15). Reconnect with Last-Event-ID (or ?last_event_id=) to "
            "get exactly what was missed within INBOX_EVENT_RETENTION_SECONDS; from an event no longer kept the "
            "stream sends a reset event (data: the counts; reload the list), then what follows. Without it the stream "
            "starts with a counts event. Open it with a one-use ?ticket= (POST /api/v1/inbox/stream/tickets), "
            "Authorization: Bearer, or ?token= (the only inbox URL that takes a token). The stream ends when the token "
            "expires or is revoked, or its API client is rotated or revoked, even if its reader has stopped reading; "
            "and when its reader takes no event for INBOX_STREAM_SEND_TIMEOUT_SECONDS. A user may hold "
            "INBOX_STREAMS_PER_USER (5) streams at once, a client's users INBOX_STREAMS_PER_CLIENT.",
            "tags": ["inbox"],
            "security": [{"inboxUserToken": []}],
            "parameters": [
                {
                    "name": "ticket",
                    "in": "query",
                    "required": False,
                    "schema": {"type": "string", "maxLength": 2048},
                    "description": "A one-use stream ticket from POST /api/v1/inbox/stream/tickets.",
                },
                {
                    "name": "token",
                    "in": "query",
                    "required": False,
                    "schema": {"type": "string", "maxLength": 2048},
                    "description": "The user token, where neither a ticket nor a header can be used.",
                },
                {
                    "name": "last_event_id",
                    "in": "query",
                    "required": False,
                    "schema": {"type": "string", "pattern": "^[0-9]{1,19}$"},
                    "description": "As Last-Event-ID, for a page that opens a new EventSource (with a new ticket).",
                },
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
                "401": {
                    "description": "No ticket nor inbox user token, or one used already, expired, revoked (or its client "
                    "rotated or revoked) or not a user token.",
                    "content": error,
                },
                "429": {
                    "description": "Over the user's request rate (INBOX_USER_THROTTLE_RATE, code throttled), or the user, "
                    "the client or the server holds all the streams it may (code too_many_streams); try again after "
                    "Retry-After.",
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
