"""The support admin, one module per model family; importing them registers their ModelAdmins."""

import django_dramatiq.admin  # noqa: F401  (registers its Task admin first, so it can be taken out below)
from django.contrib import admin
from django_dramatiq.models import Task

from . import (  # noqa: F401  (registers the admins)
    broadcasts,
    captured,
    categories,
    clients,
    dead_letters,
    digests,
    inbox,
    notifications,
    recipients,
    status_events,
    suppressions,
    templates,
)

# django_dramatiq's "Tasks" admin lists what its AdminMiddleware records; that middleware is not
# installed (a row per message would double the writes of every delivery), so the page would only
# ever say "0 tasks". Deliveries are the notifications' and dead letters' pages.
if admin.site.is_registered(Task):
    admin.site.unregister(Task)
