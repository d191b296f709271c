import uuid

import django.db.models.deletion
import django.utils.timezone
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("notifications", "0008_provider_feedback"),
    ]

    operations: list[migrations.operations.base.Operation] = [
        migrations.AddField(
            model_name="apiclient",
            name="status_webhook_url",
            field=models.CharField(blank=True, default="", max_length=2000),
        ),
        migrations.CreateModel(
            name="StatusEvent",
            fields=[
                ("id", models.UUIDField(default=uuid.uuid4, editable=False, primary_key=True, serialize=False)),
                (
                    "type",
                    models.CharField(
                        choices=[
                            ("notification.delivered", "Delivered"),
                            ("notification.failed", "Failed"),
                            ("notification.dead", "Dead"),
                            ("notification.suppressed", "Suppressed"),
                            ("notification.bounced", "Bounced"),
                            ("notification.complained", "Complained"),
                        ],
                        max_length=32,
                    ),
                ),
                ("status", models.CharField(help_text="The notification's status the event reports.", max_length=16)),
                ("channel", models.CharField(max_length=16)),
                ("occurred_at", models.DateTimeField()),
                (
                    "state",
                    models.CharField(
                        choices=[("pending", "Pending"), ("delivered", "Delivered"), ("dead", "Dead")],
                        default="pending",
                        max_length=16,
                    ),
                ),
                ("attempt_count", models.PositiveIntegerField(default=0)),
                ("next_attempt_at", models.DateTimeField(default=django.utils.timezone.now)),
                ("enqueued_at", models.DateTimeField(blank=True, null=True)),
                ("last_error", models.TextField(blank=True, default="")),
                ("created_at", models.DateTimeField(default=django.utils.timezone.now, editable=False)),
                ("delivered_at", models.DateTimeField(blank=True, null=True)),
                (
                    "client",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE, related_name="status_events", to="notifications.apiclient"
                    ),
                ),
                (
                    "notification",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="status_events",
                        to="notifications.notification",
                    ),
                ),
            ],
            options={
                "ordering": ["-created_at"],
                "indexes": [
                    models.Index(fields=["state", "next_attempt_at"], name="status_event_state_due"),
                    models.Index(fields=["created_at"], name="status_event_created"),
                ],
            },
        ),
    ]
