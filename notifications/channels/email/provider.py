"""The email channel: Django's email backend (SMTP in production, a file or console locally)."""

from __future__ import annotations

import contextlib
import smtplib
import threading
from collections.abc import Mapping
from typing import Any

from django.conf import settings
from django.core.mail import EmailMessage, EmailMultiAlternatives, get_connection

from ..base import OutgoingMessage, PermanentChannelError, SendResult, TransientChannelError
from .settings import backup_relay


class _ConnectionPerThread:
    """One open email backend connection per worker thread, reused across sends: an SMTP
    handshake (and TLS, and AUTH) per message cost more than the message. Keyed by the email
    settings, so a change of server opens a new one."""

    def __init__(self, **connection_settings: Any) -> None:
        self._local = threading.local()
        self._connection_settings = connection_settings

    def _settings_key(self) -> tuple[Any, ...]:
        names = ("EMAIL_BACKEND", "EMAIL_HOST", "EMAIL_PORT", "EMAIL_HOST_USER")
        return (*(getattr(settings, name, None) for name in names), *sorted(self._connection_settings.items()))

    def get(self) -> tuple[Any, bool]:
        """This thread's connection, and whether it was open already (reused)."""
        held = getattr(self._local, "held", None)
        key = self._settings_key()
        if held is not None and held[0] == key:
            return held[1], True
        self.drop()
        connection = get_connection(fail_silently=False, **self._connection_settings)
        connection.open()
        self._local.held = (key, connection)
        return connection, False

    def drop(self) -> None:
        held = getattr(self._local, "held", None)
        self._local.held = None
        if held is not None:
            # A connection already broken is exactly what is being dropped.
            with contextlib.suppress(Exception):
                held[1].close()


class DjangoEmailProvider:
    def __init__(self, **connection_settings: Any) -> None:
        # A failover relay (EMAIL_FAILOVER_ACCOUNTS): host, port, username, password, use_tls and
        # use_ssl for the backend's connection instead of the EMAIL_* settings.
        self._connections = _ConnectionPerThread(**connection_settings)
        self._username = connection_settings.get("username")

    @classmethod
    def for_failover_account(cls, settings: Mapping[str, Any]) -> DjangoEmailProvider:
        return cls(**backup_relay(settings))

    def account(self) -> str:
        return str(self._username if self._username is not None else getattr(settings, "EMAIL_HOST_USER", ""))

    def send(self, message: OutgoingMessage) -> SendResult:
        email = EmailMultiAlternatives(
            subject=message.subject or "(no subject)",
            body=message.body,
            from_email=settings.DEFAULT_FROM_EMAIL,
            to=[message.address],
            headers={
                **message.headers,
                "X-Notification-Id": message.notification_id,
                # Lets the receiving side (and our own SMTP logs) spot a repeat of the same send.
                "Message-ID": f"<{message.notification_id}@{settings.DEFAULT_FROM_EMAIL.rpartition('@')[2] or 'localhost'}>",
            },
        )
        if message.html_body:
            email.attach_alternative(message.html_body, "text/html")  # multipart/alternative: text, then HTML
        try:
            sent = self._send_on_kept_connection(email)
        except smtplib.SMTPRecipientsRefused as exc:
            # A 4xx refusal (greylisting, a full mailbox, too many recipients now) may pass later.
            codes = [code for code, _ in exc.recipients.values()]
            extra = {"smtp_code": codes[0]} if codes else {}
            if all(500 <= code < 600 for code in codes):
                raise PermanentChannelError(f"recipient refused: {exc.recipients}", extra=extra) from exc
            raise TransientChannelError(f"recipient refused for now: {exc.recipients}", extra=extra) from exc
        except smtplib.SMTPResponseException as exc:
            self._connections.drop()  # the session may be in any state after an error reply
            extra = {"smtp_code": exc.smtp_code}
            if 500 <= exc.smtp_code < 600:
                raise PermanentChannelError(f"SMTP {exc.smtp_code}: {exc.smtp_error!r}", extra=extra) from exc
            raise TransientChannelError(f"SMTP {exc.smtp_code}: {exc.smtp_error!r}", extra=extra) from exc
        except (TimeoutError, smtplib.SMTPException, OSError) as exc:
            self._connections.drop()
            raise TransientChannelError(f"{type(exc).__name__}: {exc}") from exc
        if not sent:
            raise TransientChannelError("the email backend reported 0 messages sent")
        return SendResult(provider_message_id=email.extra_headers["Message-ID"], response_summary="accepted by SMTP")

    def _send_on_kept_connection(self, email: EmailMessage) -> int:
        """Send on this thread's open connection; when the server closed it while it sat idle
        (servers drop idle sessions after minutes), once more on a fresh one."""
        connection, reused = self._connections.get()
        try:
            return int(connection.send_messages([email]))
        except OSError as exc:
            # SMTP replies are OSErrors too; only a broken connection is worth a second try.
            broken = isinstance(exc, smtplib.SMTPServerDisconnected) or not isinstance(exc, smtplib.SMTPException)
            if not (broken and reused):
                raise
            self._connections.drop()
        connection, _ = self._connections.get()
        return int(connection.send_messages([email]))
