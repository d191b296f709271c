"""The support admin, one module per model family; importing them registers their ModelAdmins."""

from . import categories, clients, dead_letters, notifications, recipients, templates  # noqa: F401  (registers the admins)
