"""The email channel: Django's email backend (SMTP in production, a file or console locally)."""

from __future__ import annotations

import smtplib

from django.conf import settings
from django.core.mail import EmailMessage, get_connection

from .base import OutgoingMessage, PermanentChannelError, SendResult, TransientChannelError


class DjangoEmailProvider:
    def account(self) -> str:
        return str(getattr(settings, "EMAIL_HOST_USER", ""))

    def send(self, message: OutgoingMessage) -> SendResult:
        email = EmailMessage(
            subject=message.subject or "(no subject)",
            body=message.body,
            from_email=settings.DEFAULT_FROM_EMAIL,
            to=[message.address],
            headers={
                "X-Notification-Id": message.notification_id,
                # Lets the receiving side (and our own SMTP logs) spot a repeat of the same send.
                "Message-ID": f"<{message.notification_id}@{settings.DEFAULT_FROM_EMAIL.rpartition('@')[2] or 'localhost'}>",
            },
        )
        try:
            with get_connection(fail_silently=False) as connection:
                sent = connection.send_messages([email])
        except smtplib.SMTPRecipientsRefused as exc:
            # A 4xx refusal (greylisting, a full mailbox, too many recipients now) may pass later.
            if all(500 <= code < 600 for code, _ in exc.recipients.values()):
                raise PermanentChannelError(f"recipient refused: {exc.recipients}") from exc
            raise TransientChannelError(f"recipient refused for now: {exc.recipients}") from exc
        except smtplib.SMTPResponseException as exc:
            if 500 <= exc.smtp_code < 600:
                raise PermanentChannelError(f"SMTP {exc.smtp_code}: {exc.smtp_error!r}") from exc
            raise TransientChannelError(f"SMTP {exc.smtp_code}: {exc.smtp_error!r}") from exc
        except (TimeoutError, smtplib.SMTPException, OSError) as exc:
            raise TransientChannelError(f"{type(exc).__name__}: {exc}") from exc
        if not sent:
            raise TransientChannelError("the email backend reported 0 messages sent")
        return SendResult(provider_message_id=email.extra_headers["Message-ID"], response_summary="accepted by SMTP")
