"""The email channel's settings: Django's EMAIL_* for the primary relay (read by the mail backend
itself), EMAIL_FAILOVER_ACCOUNTS for the backups."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

# A backup relay is always SMTP, whatever EMAIL_BACKEND the primary uses.
BACKUP_BACKEND = "django.core.mail.backends.smtp.EmailBackend"


def backup_relay(settings: Mapping[str, Any]) -> dict[str, Any]:
    """One entry of EMAIL_FAILOVER_ACCOUNTS as the mail backend's connection arguments (host,
    port, username, password, use_tls, use_ssl) over the SMTP backend."""
    return {"backend": BACKUP_BACKEND, **settings}
