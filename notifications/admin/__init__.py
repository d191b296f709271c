"""The support admin, one module per model family; importing them registers their ModelAdmins."""

from . import (  # noqa: F401  (registers the admins)
    broadcasts,
    categories,
    clients,
    dead_letters,
    digests,
    notifications,
    recipients,
    status_events,
    suppressions,
    templates,
)
