"""App configuration: wires the actors' module so Dramatiq knows them in every process."""

from django.apps import AppConfig


class NotificationsConfig(AppConfig):
    name = "notifications"
    verbose_name = "Notifications"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from django.core import signals

        from . import actors, conf, connections, tracing  # noqa: F401  (registers actors; connects setting_changed)

        # When each connection last served a request (connections.py; the web's first middleware
        # checks at the next request's start only those idle since for a while).
        signals.request_finished.connect(connections.database_connections_stamp, dispatch_uid="notifications-connections-stamp")

        tracing.configure()

        # Parse and validate the app's options now, so a bad value stops start-up with its message.
        conf.get_config()
