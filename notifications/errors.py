"""The domain's error tree: one root with a machine-readable code, a few precise children."""

from __future__ import annotations

from typing import Any


class NotificationError(Exception):
    """Root of every error the domain raises on purpose."""

    code = "notification_error"

    def __init__(self, message: str, *, code: str | None = None, extra: dict[str, Any] | None = None):
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code
        self.extra = extra or {}


class ValidationFailed(NotificationError):
    """Input that can never be accepted; ``extra['field']`` names the culprit."""

    code = "invalid"


class TemplateRenderFailed(ValidationFailed):
    """A template that compiles but raised while rendering (a filter's bad argument, a reverse of
    no URL, nesting too deep, a render past its budget): the same data fails the same way again,
    so a digest's close or a broadcast's fan-out that meets it ends ``failed``, never retried."""

    code = "template_render_failed"


class RenderLimitExceeded(TemplateRenderFailed):
    """A template's render stopped at its bound: its output past MAX_MESSAGE_BYTES, its work past
    TEMPLATE_RENDER_SECONDS, what its filters made past 32 times MAX_MESSAGE_BYTES, a filter's
    width beyond the limit, or its sandbox process killed past TEMPLATE_SANDBOX_MEMORY_BYTES or
    TEMPLATE_SANDBOX_CPU_SECONDS (``extra['field']``: template)."""

    code = "render_limit"


class NotFound(NotificationError):
    code = "not_found"


class InvalidTransition(NotificationError):
    """A status change that the notification's current status does not allow."""

    code = "invalid_transition"


class IdempotencyConflict(NotificationError):
    """The same idempotency key with a different request body."""

    code = "idempotency_key_reused"


class IdempotencyInFlight(NotificationError):
    """The same idempotency key while its first request is still being processed."""

    code = "idempotency_key_in_flight"


class LimitExceeded(NotificationError):
    """A per-client limit the request would go past; ``extra['limit']`` names the setting that
    sets it (TOPIC_SUBSCRIBERS_MAX) and ``extra['value']`` the client's value of it."""

    code = "limit_exceeded"


class RateLimitExceeded(LimitExceeded):
    """A per-client limit counted over time (BROADCASTS_PER_HOUR_MAX): trying again after
    ``retry_after`` seconds can succeed."""

    def __init__(self, message: str, *, retry_after: float, **kwargs: Any):
        super().__init__(message, **kwargs)
        self.retry_after = retry_after


class ChannelError(NotificationError):
    """A provider could not deliver; the subclasses say whether trying again can help."""


class TransientChannelError(ChannelError):
    """Worth retrying: a timeout, a connection error, a 5xx or a 429."""

    code = "transient"

    def __init__(self, message: str, *, retry_after: float | None = None, **kwargs: Any):
        super().__init__(message, **kwargs)
        self.retry_after = retry_after


class PermanentChannelError(ChannelError):
    """Will fail the same way every time: a rejected address, a 4xx other than 429."""

    code = "permanent"


class TokenRefused(NotificationError):
    """An inbox user token that is not one (a client token, a forgery), has expired, or was
    issued before its user's tokens were revoked; ``extra['reason']`` says which."""

    code = "token_refused"
