import uuid

import django.db.models.deletion
import django.utils.timezone
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("notifications", "0010_routing"),
    ]

    operations: list[migrations.operations.base.Operation] = [
        migrations.CreateModel(
            name="Topic",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("key", models.CharField(max_length=100)),
                ("name", models.CharField(blank=True, default="", max_length=255)),
                ("created_at", models.DateTimeField(default=django.utils.timezone.now, editable=False)),
                ("updated_at", models.DateTimeField(auto_now=True)),
                (
                    "client",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE, related_name="topics", to="notifications.apiclient"
                    ),
                ),
            ],
            options={"ordering": ["client", "key"]},
        ),
        migrations.AddConstraint(
            model_name="topic",
            constraint=models.UniqueConstraint(fields=("client", "key"), name="topic_unique_per_client"),
        ),
        migrations.CreateModel(
            name="TopicSubscription",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("created_at", models.DateTimeField(default=django.utils.timezone.now, editable=False)),
                (
                    "recipient",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="topic_subscriptions",
                        to="notifications.recipient",
                    ),
                ),
                (
                    "topic",
                    models.ForeignKey(
                        db_index=False,
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="subscriptions",
                        to="notifications.topic",
                    ),
                ),
            ],
        ),
        migrations.AddConstraint(
            model_name="topicsubscription",
            constraint=models.UniqueConstraint(fields=("topic", "recipient"), name="topic_subscription_unique"),
        ),
        migrations.CreateModel(
            name="Broadcast",
            fields=[
                ("id", models.UUIDField(default=uuid.uuid4, editable=False, primary_key=True, serialize=False)),
                (
                    "channel",
                    models.CharField(
                        choices=[("email", "Email"), ("sms", "Sms"), ("push", "Push"), ("webhook", "Webhook")], max_length=16
                    ),
                ),
                ("channels", models.JSONField(blank=True, default=list)),
                ("subject", models.CharField(blank=True, default="", max_length=998)),
                ("message", models.TextField(blank=True, default="")),
                ("template_key", models.CharField(blank=True, default="", max_length=100)),
                ("data", models.JSONField(blank=True, default=dict)),
                ("metadata", models.JSONField(blank=True, default=dict)),
                ("locale", models.CharField(blank=True, default="", help_text="Else each recipient's.", max_length=35)),
                ("priority", models.CharField(choices=[("high", "High"), ("bulk", "Bulk")], default="bulk", max_length=8)),
                (
                    "status",
                    models.CharField(
                        choices=[
                            ("pending", "Pending"),
                            ("fanning_out", "Fanning Out"),
                            ("sent", "Sent"),
                            ("cancelled", "Cancelled"),
                        ],
                        default="pending",
                        max_length=16,
                    ),
                ),
                (
                    "total",
                    models.PositiveIntegerField(
                        default=0, help_text="Subscribers when the fan-out started; the notifications made once it is sent."
                    ),
                ),
                ("cursor", models.BigIntegerField(default=0, help_text="The last subscriber (recipient id) fanned out.")),
                ("lease", models.UUIDField(blank=True, editable=False, null=True)),
                ("idempotency_key", models.CharField(blank=True, default="", max_length=255)),
                ("created_at", models.DateTimeField(default=django.utils.timezone.now, editable=False)),
                ("updated_at", models.DateTimeField(default=django.utils.timezone.now)),
                ("started_at", models.DateTimeField(blank=True, null=True)),
                ("finished_at", models.DateTimeField(blank=True, null=True)),
                (
                    "category",
                    models.ForeignKey(
                        db_index=False,
                        on_delete=django.db.models.deletion.PROTECT,
                        related_name="+",
                        to="notifications.category",
                    ),
                ),
                (
                    "client",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.PROTECT, related_name="broadcasts", to="notifications.apiclient"
                    ),
                ),
                (
                    "topic",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.PROTECT, related_name="broadcasts", to="notifications.topic"
                    ),
                ),
            ],
            options={"ordering": ["-created_at"]},
        ),
        migrations.AddIndex(
            model_name="broadcast",
            index=models.Index(fields=["client", "-created_at"], name="broadcast_client_created"),
        ),
        migrations.AddIndex(
            model_name="broadcast",
            index=models.Index(fields=["status", "updated_at"], name="broadcast_status_updated"),
        ),
        migrations.AddField(
            model_name="notification",
            name="broadcast",
            field=models.ForeignKey(
                blank=True,
                db_index=False,
                null=True,
                on_delete=django.db.models.deletion.PROTECT,
                related_name="notifications",
                to="notifications.broadcast",
            ),
        ),
        migrations.AddIndex(
            model_name="notification",
            index=models.Index(
                condition=models.Q(("broadcast__isnull", False)), fields=["broadcast", "status"], name="notif_broadcast_status"
            ),
        ),
        migrations.AddConstraint(
            model_name="notification",
            constraint=models.UniqueConstraint(fields=("broadcast", "user_id"), name="notif_broadcast_user_unique"),
        ),
    ]
