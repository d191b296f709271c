import uuid

import django.db.models.deletion
import django.utils.timezone
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("notifications", "0011_broadcasts"),
    ]

    operations: list[migrations.operations.base.Operation] = [
        migrations.AddField(
            model_name="category",
            name="max_per_recipient",
            field=models.JSONField(
                blank=True,
                help_text='At most {"count": N, "per_seconds": S} to one recipient; empty: no cap. Critical categories are never capped.',
                null=True,
            ),
        ),
        migrations.AddField(
            model_name="notification",
            name="digest_data",
            field=models.JSONField(blank=True, null=True),
        ),
        migrations.CreateModel(
            name="Digest",
            fields=[
                ("id", models.UUIDField(default=uuid.uuid4, editable=False, primary_key=True, serialize=False)),
                ("user_id", models.CharField(max_length=255)),
                ("key", models.CharField(max_length=100)),
                (
                    "status",
                    models.CharField(
                        choices=[
                            ("open", "Open"),
                            ("closing", "Closing"),
                            ("sent", "Sent"),
                            ("empty", "Empty"),
                            ("cancelled", "Cancelled"),
                        ],
                        default="open",
                        max_length=16,
                    ),
                ),
                ("opened_at", models.DateTimeField(default=django.utils.timezone.now)),
                (
                    "closes_at",
                    models.DateTimeField(help_text="The window's end: the digest is sent then, or earlier at max_items."),
                ),
                ("max_items", models.PositiveIntegerField()),
                ("item_count", models.PositiveIntegerField(default=0, help_text="Members joined and not cancelled.")),
                (
                    "channel",
                    models.CharField(
                        choices=[("email", "Email"), ("sms", "Sms"), ("push", "Push"), ("webhook", "Webhook")], max_length=16
                    ),
                ),
                ("address", models.CharField(max_length=2000)),
                ("template_key", models.CharField(max_length=100)),
                (
                    "locale",
                    models.CharField(blank=True, default="", help_text="The locale the first request asked for.", max_length=35),
                ),
                (
                    "subject",
                    models.CharField(blank=True, default="", help_text="The first request's subject override.", max_length=998),
                ),
                ("priority", models.CharField(default="high", max_length=8)),
                ("metadata", models.JSONField(blank=True, default=dict)),
                ("closed_at", models.DateTimeField(blank=True, null=True)),
                ("updated_at", models.DateTimeField(auto_now=True)),
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
                        on_delete=django.db.models.deletion.PROTECT, related_name="+", to="notifications.apiclient"
                    ),
                ),
                (
                    "notification",
                    models.ForeignKey(
                        blank=True,
                        help_text="The one notification the digest was sent as.",
                        null=True,
                        on_delete=django.db.models.deletion.SET_NULL,
                        related_name="+",
                        to="notifications.notification",
                    ),
                ),
            ],
            options={
                "ordering": ["-opened_at"],
                "indexes": [models.Index(fields=["status", "closes_at"], name="digest_status_closes")],
                "constraints": [
                    models.UniqueConstraint(
                        condition=models.Q(("status", "open")),
                        fields=("client", "user_id", "key"),
                        name="digest_one_open_per_key",
                    )
                ],
            },
        ),
        migrations.AddField(
            model_name="notification",
            name="digest",
            field=models.ForeignKey(
                blank=True,
                db_index=False,
                null=True,
                on_delete=django.db.models.deletion.SET_NULL,
                related_name="notifications",
                to="notifications.digest",
            ),
        ),
        migrations.AddIndex(
            model_name="notification",
            index=models.Index(
                condition=models.Q(("digest__isnull", False)), fields=["digest", "status"], name="notif_digest_status"
            ),
        ),
    ]
