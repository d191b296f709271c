"""What turning a claim's returned rows into what the send reads costs in-process (issue #37: typed
claims): fifty rows of the claim's statement made into a Claim each (models/claims.py), or, on the
code before it (8ae3b80), into Notifications with the client's columns set on them and an attempt
each. Microseconds a row, the median of ROUNDS rounds; no database (the embedded default's
converters, as SQLite returns the row). Run it on two trees in turn to compare them:

    env -u DATABASE_URL -u BROKER_URL -u REDIS_URL .venv/bin/python -m bench.claim_rows
"""

from __future__ import annotations

import os
import statistics
import time
import uuid
from typing import Any

ROUNDS = 9
REPEATS = 400
ROWS = 50


def main() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "platform.settings")
    import django

    django.setup()
    from django.db import connection
    from django.utils import timezone

    from notifications.models import Notification, claims, rows

    now = timezone.now()
    sample = Notification(id=uuid.uuid4(), client_id=1, channel="email", address="ann@example.com", message="hi", metadata={})
    values = [field.get_db_prep_save(getattr(sample, field.attname), connection) for field in Notification._meta.concrete_fields]
    extra = {
        "client_name": "acme",
        "client_webhook_secret": "whsec_1",
        "client_webhook_secrets_retired": "[]",
        "client_status_webhook_url": "",
        "client_is_test": 0,
        "last_attempt_number": 0,
        "attempt_id": 7,
    }
    returned = [(*values, *extra.values())] * ROWS

    if hasattr(claims, "claim_of_row"):  # typed claims

        def made() -> Any:
            width = len(Notification._meta.concrete_fields)
            names = list(extra)
            return [
                claims.claim_of_row(
                    notification,
                    dict(zip(names, row[width:], strict=True)),
                    now=now,
                    inserted=True,
                    webhook_secret_grace_seconds=0,
                )
                for notification, row in zip(rows.model_instances(Notification, returned), returned, strict=True)
            ]
    else:  # 8ae3b80: attributes set on each Notification, an attempt made from them
        from notifications.services.delivery import send

        def made() -> Any:
            notifications = rows.model_instances(Notification, returned, extra=list(extra))  # type: ignore[call-arg]
            return [send._claimed_attempt(notification, now=now) for notification in notifications]  # type: ignore[attr-defined]

    for _ in range(50):
        made()
    medians = []
    for _ in range(ROUNDS):
        started = time.perf_counter()
        for _ in range(REPEATS):
            made()
        medians.append((time.perf_counter() - started) / (REPEATS * ROWS) * 1e6)
    print(f"claim_rows: {statistics.median(medians):.2f} us a row (median of {ROUNDS} rounds of {REPEATS} claims of {ROWS})")


if __name__ == "__main__":
    main()
