"""WSGI entry point (gunicorn platform.wsgi). Run it as `python -m gunicorn` from the repo root so
this package, not the standard `platform`, is found first (see platform/__init__.py)."""

import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "platform.settings")
application = get_wsgi_application()
