"""The in-app inbox's options (its streams, their limits and its tokens), a group of the app's options (app.py)."""

from __future__ import annotations

from .option import Option, group

INBOX_OPTIONS: tuple[Option, ...] = group(
    "In-app inbox",
    Option(
        "INBOX_STREAM_HEARTBEAT_SECONDS",
        float,
        15.0,
        "a heartbeat comment on every idle inbox stream this often",
        minimum=0.1,
    ),
    Option(
        "INBOX_EVENT_RETENTION_SECONDS",
        float,
        3600.0,
        "how long inbox stream events are kept for a resume (`Last-Event-ID`)",
        minimum=60,
    ),
    Option(
        "INBOX_STREAMS_PER_USER",
        int,
        5,
        "live inbox streams one user may hold open at once, over every process (more: 429)",
        minimum=1,
    ),
    Option(
        "INBOX_STREAMS_PER_CLIENT",
        int,
        10000,
        "live inbox streams the users of one API client may hold open at once, over every process (more: 429)",
        minimum=1,
    ),
    Option(
        "INBOX_STREAMS_PER_PROCESS",
        int,
        4000,
        "live inbox streams one web process holds at most (about 58 KB and a file descriptor each; one client at most half; more: 429)",
        minimum=1,
    ),
    Option(
        "INBOX_STREAM_SEND_TIMEOUT_SECONDS",
        float,
        30.0,
        "an inbox stream whose reader has not taken an event for this long is closed",
        minimum=1,
    ),
    Option("INBOX_DEMO", bool, False, "serve the demo page `/inbox/demo/` without DEBUG too (with DEBUG it is always served)"),
)
