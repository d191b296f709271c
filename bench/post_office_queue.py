"""Empty the post_office project's tables and queue COUNT emails in them, as an application queues
mail with post_office (``mail.send_many``); run with DJANGO_SETTINGS_MODULE=bench.post_office_settings.

    python -m bench.post_office_queue COUNT
"""

from __future__ import annotations

import sys

import django


def main() -> None:
    count = int(sys.argv[1])
    django.setup()
    from post_office import mail
    from post_office.models import Email, Log

    Log.objects.all().delete()
    Email.objects.all().delete()
    for start in range(0, count, 500):
        mail.send_many(
            [
                {
                    "sender": "notifications@localhost",
                    "recipients": [f"u{index}@example.com"],
                    "subject": f"Bench {index}",
                    "message": f"Hello u{index}, bench.",
                }
                for index in range(start, min(count, start + 500))
            ]
        )
    print(Email.objects.count())


def sent() -> None:
    """Print how many emails are sent and how many are not."""
    django.setup()
    from post_office.models import STATUS, Email

    print(Email.objects.filter(status=STATUS.sent).count(), Email.objects.exclude(status=STATUS.sent).count())


if __name__ == "__main__":
    if sys.argv[1] == "sent":
        sent()
    else:
        main()
