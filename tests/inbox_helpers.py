"""What the inbox tests share: user tokens over HTTP, items put in an inbox, and a reader of a live
server-sent event stream (a thread following the response line by line)."""

from __future__ import annotations

import json
import queue
import threading
import time
import uuid
from dataclasses import dataclass
from typing import Any

import requests

from notifications.inbox.store import inbox_item_deliver
from notifications.models import ApiClient, InboxItem


def user_token(base_url: str, client_token: str, user_id: str, ttl_seconds: int = 600) -> str:
    answer = requests.post(
        f"{base_url}/api/v1/inbox/tokens",
        json={"user_id": user_id, "ttl_seconds": ttl_seconds},
        headers={"Authorization": f"Bearer {client_token}"},
        timeout=10,
    )
    assert answer.status_code == 201, answer.text
    return str(answer.json()["token"])


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def stream_ticket(base_url: str, token: str) -> str:
    answer = requests.post(f"{base_url}/api/v1/inbox/stream/tickets", headers=bearer(token), timeout=10)
    assert answer.status_code == 201, answer.text
    return str(answer.json()["ticket"])


def deliver_item(client: ApiClient, user_id: str, title: str = "Hello", **fields: Any) -> InboxItem:
    """An item as the in_app provider makes it, for a notification that need not exist."""
    item, made = inbox_item_deliver(
        values={
            "client_id": client.pk,
            "user_id": user_id,
            "notification_id": uuid.uuid4(),
            "title": title,
            "body": f"{title} body",
            "category": fields.pop("category", "transactional"),
            **fields,
        }
    )
    assert made
    return item


@dataclass(frozen=True)
class SseEvent:
    id: int
    type: str
    data: dict[str, Any]
    received_at: float


class SseReader:
    """Follows GET /inbox/stream in a thread; events land in ``events`` (a queue) as they arrive."""

    def __init__(self, url: str, *, token: str = "", ticket: str = "", last_event_id: int | None = None) -> None:
        headers = {"Accept": "text/event-stream"}
        if last_event_id is not None:
            headers["Last-Event-ID"] = str(last_event_id)
        params = {"ticket": ticket} if ticket else {"token": token}
        self.response = requests.get(url, params=params, headers=headers, stream=True, timeout=(5, 60))
        assert self.response.status_code == 200, self.response.text
        self.events: queue.Queue[SseEvent] = queue.Queue()
        self.comments: list[str] = []
        # Set when the server has ended the stream (or the test closed it).
        self.ended = threading.Event()
        self._thread = threading.Thread(target=self._follow, daemon=True)
        self._thread.start()

    def _follow(self) -> None:
        fields: dict[str, str] = {}
        try:
            for raw in self.response.iter_lines(chunk_size=1, decode_unicode=True):
                line = raw or ""
                if line.startswith(":"):
                    self.comments.append(line)
                elif line:
                    name, _, value = line.partition(":")
                    fields[name] = value.lstrip(" ")
                elif "data" in fields:
                    self.events.put(
                        SseEvent(int(fields["id"]), fields.get("event", "message"), json.loads(fields["data"]), time.monotonic())
                    )
                    fields = {}
                else:
                    fields = {}
        except (requests.RequestException, AttributeError, ValueError):
            pass  # closed by the test
        finally:
            self.ended.set()

    def next(self, timeout: float = 5.0) -> SseEvent:
        return self.events.get(timeout=timeout)

    def next_of(self, event_type: str, timeout: float = 5.0) -> SseEvent:
        deadline = time.monotonic() + timeout
        while True:
            event = self.next(timeout=max(0.01, deadline - time.monotonic()))
            if event.type == event_type:
                return event

    def close(self) -> None:
        self.response.close()

    def __enter__(self) -> SseReader:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
