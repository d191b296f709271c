#!/usr/bin/env python
"""Django's command-line utility for the notification platform."""

import os
import sys


def main() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "platform.settings")
    from django.core.exceptions import ImproperlyConfigured
    from django.core.management import execute_from_command_line

    try:
        execute_from_command_line(sys.argv)
    except ImproperlyConfigured as exc:
        # A bad setting is the operator's to fix: one clear line, not a traceback.
        sys.exit(f"configuration error: {exc}")


if __name__ == "__main__":
    main()
