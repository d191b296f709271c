"""Idempotency keys: a request's key written with its final answer, and that answer replayed to
a request that comes again with the key (or refused with 422 when its body is another's).

Accept, the batch accept and the broadcast accept all claim their keys here, so a key answers the
same way whichever of them wrote it."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from ...conf import get_config
from ...errors import IdempotencyConflict, IdempotencyInFlight
from ...models import ApiClient, IdempotencyKey, IdempotencyKeyState
from ...sql import insert_or_nothing


@dataclass(frozen=True)
class AcceptResult:
    status_code: int
    body: dict[str, Any]
    replayed: bool
    notification_id: str


def request_fingerprint(payload: Any) -> str:
    """SHA-256 of the request body in canonical JSON, so key order and spacing do not matter."""
    canonical = json.dumps(payload, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(canonical.encode()).hexdigest()


def idempotency_claim(*, client: ApiClient, key: str, fingerprint: str, body: dict[str, Any], now: datetime) -> bool:
    """Insert the key with its final answer; False when a live key is there already. An expired
    key is replaced in place (only here, on the conflict, so the usual case is one INSERT)."""
    values = idempotency_key_row(client=client, key=key, fingerprint=fingerprint, body=body, now=now)
    if insert_or_nothing(IdempotencyKey, values, conflict_fields=("client_id", "key")):
        return True
    replaced = IdempotencyKey.objects.filter(client=client, key=key, expires_at__lte=now).update(
        **{name: value for name, value in values.items() if name not in ("client_id", "key")}
    )
    return bool(replaced)


def idempotency_key_row(*, client: ApiClient, key: str, fingerprint: str, body: dict[str, Any], now: datetime) -> dict[str, Any]:
    """A key's row as it is written: already completed, with the answer it replays."""
    return {
        "client_id": client.pk,
        "key": key,
        "fingerprint": fingerprint,
        "state": IdempotencyKeyState.COMPLETED,
        "response_status": 202,
        "response_body": body,
        "created_at": now,
        "expires_at": now + timedelta(seconds=get_config().idempotency_key_ttl_seconds),
    }


def idempotency_replay(*, client: ApiClient, key: str, fingerprint: str, now: datetime) -> AcceptResult | None:
    """The stored answer of a live key (422 for another body); None when there is none."""
    record = IdempotencyKey.objects.filter(client=client, key=key, expires_at__gt=now).first()
    return None if record is None else idempotency_answer(record, fingerprint=fingerprint)


def idempotency_answer(record: IdempotencyKey, *, fingerprint: str) -> AcceptResult:
    """What a stored key answers a request with ``fingerprint``: its replay, or 422 for another body."""
    key = record.key
    if record.fingerprint != fingerprint:
        raise IdempotencyConflict(
            "this Idempotency-Key was already used with a different request body",
            extra={"idempotency_key": key},
        )
    if record.state != IdempotencyKeyState.COMPLETED:  # claimed without an answer: nothing to replay yet
        raise IdempotencyInFlight(
            "a request with this Idempotency-Key is still being processed; retry shortly",
            extra={"idempotency_key": key},
        )
    body = dict(record.response_body or {})
    return AcceptResult(
        status_code=record.response_status or 202, body=body, replayed=True, notification_id=str(body.get("id", ""))
    )
