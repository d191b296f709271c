"""The support admin, one module per model family; importing them registers their ModelAdmins."""

from . import clients, dead_letters, notifications, recipients  # noqa: F401  (registers the admins)
