"""App configuration: wires the actors' module so Dramatiq knows them in every process."""

from django.apps import AppConfig


class NotificationsConfig(AppConfig):
    name = "notifications"
    verbose_name = "Notifications"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from . import actors, conf, tracing  # noqa: F401  (registers actors; connects setting_changed)

        tracing.configure()

        # Parse and validate the app's options now, so a bad value stops start-up with its message.
        conf.get_config()
