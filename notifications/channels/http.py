"""What an HTTP provider's answer means for delivery: the one status -> channel-error mapping."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import Any

import requests
import urllib3
from requests.adapters import HTTPAdapter

from .base import PermanentChannelError, TransientChannelError
from .deadline import DEADLINE_POOL_CLASSES, http_deadline

# Says what went wrong in a provider's own words, from its error body (status, parsed JSON, text).
DescribeError = Callable[[Any, str], str]
# A provider's own code for an error from its parsed body ("" for none): kept on the channel error
# as ``provider_code``, so the suppression list can tell a STOP or an uninstalled app from others.
ErrorCode = Callable[[Any], str]

# How much of a provider's error body is kept in the error message (and so on the DeliveryAttempt).
ERROR_TEXT_LIMIT = 500
# How much of a provider's answer is read: its JSON says what it did; the rest is not read.
RESPONSE_READ_LIMIT = 64 * 1024

_sessions = threading.local()


def retry_after_seconds(value: str | None) -> float | None:
    """A Retry-After header (delta-seconds or an HTTP date) in seconds from now; None if absent."""
    if not value:
        return None
    value = value.strip()
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max(0.0, (when - datetime.now(UTC)).total_seconds())


def parse_json(text: str) -> Any:
    try:
        return json.loads(text) if text else None
    except ValueError:
        return None


def json_object(text: str) -> dict[str, Any]:
    """A 2xx body as a JSON object, or {}: the send is accepted either way, so an odd body must
    not turn it into a retry."""
    payload = parse_json(text)
    return payload if isinstance(payload, dict) else {}


def describe_plain(payload: Any, text: str) -> str:
    return text.strip()[:ERROR_TEXT_LIMIT] or "(empty body)"


def raise_for_status(
    status: int,
    headers: Mapping[str, str],
    text: str,
    *,
    provider: str,
    describe: DescribeError = describe_plain,
    error_code: ErrorCode | None = None,
) -> None:
    """Raise the channel error a non-2xx answer means; return quietly on 2xx.

    429 is a rate limit (code ``throttled``, which does not spend the retry budget) honouring
    Retry-After; 408 and 5xx are worth retrying; anything else (4xx, and redirects, which are
    never followed) fails the same way every time.
    """
    if 200 <= status < 300:
        return
    payload = parse_json(text)
    detail = describe(payload, text)
    extra: dict[str, Any] = {"http_status": status}
    if error_code is not None and error_code(payload):
        extra["provider_code"] = error_code(payload)
    if status == 429:
        retry_after = retry_after_seconds(headers.get("Retry-After"))
        raise TransientChannelError(
            f"{provider} throttled the send (HTTP 429, Retry-After {retry_after}): {detail}",
            code="throttled",
            retry_after=retry_after,
            extra=extra,
        )
    if status == 408 or status >= 500:
        raise TransientChannelError(
            f"{provider} answered HTTP {status}: {detail}",
            code="provider_unavailable",
            retry_after=retry_after_seconds(headers.get("Retry-After")),
            extra=extra,
        )
    if 300 <= status < 400:
        detail = f"redirect to {headers.get('Location', '?')!r} not followed"
    raise PermanentChannelError(f"{provider} rejected the send (HTTP {status}): {detail}", code="rejected", extra=extra)


def require_settings(channel: str, values: Mapping[str, str]) -> None:
    """Fail permanently, naming the settings, when a provider's credentials are not set."""
    missing = [name for name, value in values.items() if not value]
    if missing:
        raise PermanentChannelError(f"the {channel} channel is not configured: set {', '.join(missing)}", code="not_configured")


class _DeadlineAdapter(HTTPAdapter):
    """requests' adapter whose connections keep to the deadline of ``http_deadline`` (deadline.py)."""

    def init_poolmanager(self, *args: Any, **kwargs: Any) -> None:
        super().init_poolmanager(*args, **kwargs)
        self.poolmanager.pool_classes_by_scheme = dict(DEADLINE_POOL_CLASSES)


def _session() -> requests.Session:
    # One session per worker thread: connection reuse without sharing a Session across threads.
    session: requests.Session | None = getattr(_sessions, "session", None)
    if session is None:
        session = _sessions.session = requests.Session()
        for prefix in ("http://", "https://"):
            session.mount(prefix, _DeadlineAdapter())
    return session


@dataclass(frozen=True)
class ProviderAnswer:
    """A provider's 2xx answer: its status, headers and (the first RESPONSE_READ_LIMIT bytes of) body."""

    status_code: int
    headers: Mapping[str, str]
    text: str


def provider_post(
    url: str,
    *,
    provider: str,
    timeout: float,
    describe: DescribeError = describe_plain,
    error_code: ErrorCode | None = None,
    **kwargs: Any,
) -> ProviderAnswer:
    """POST to a provider's API; returns a 2xx answer or raises the channel error it means.

    ``timeout`` is a deadline for the whole call (connect, send and the whole answer), not for
    each socket operation: a provider that trickles its answer is cut there."""
    with http_deadline(timeout) as deadline:
        try:
            with _session().post(
                url, timeout=(deadline.per_operation(), deadline.per_operation()), allow_redirects=False, stream=True, **kwargs
            ) as response:
                content = response.raw.read(RESPONSE_READ_LIMIT, decode_content=True)
                text = content.decode(response.encoding or "utf-8", "replace")
        except (requests.Timeout, urllib3.exceptions.TimeoutError) as exc:
            raise TransientChannelError(f"{provider} did not answer in time: {deadline.exceeded()}", code="timeout") from exc
        except (requests.RequestException, urllib3.exceptions.HTTPError, OSError) as exc:
            # Reading the body as it streams raises urllib3's own errors, not requests' wrappers.
            if deadline.expired():
                raise TransientChannelError(f"{provider} did not answer in time: {deadline.exceeded()}", code="timeout") from exc
            if isinstance(exc, requests.ConnectionError):
                raise TransientChannelError(f"could not reach {provider}: {exc}", code="connection_error") from exc
            raise TransientChannelError(f"{provider} request failed: {exc}", code="request_error") from exc
    raise_for_status(response.status_code, response.headers, text, provider=provider, describe=describe, error_code=error_code)
    return ProviderAnswer(response.status_code, response.headers, text)
