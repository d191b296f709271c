"""Provider feedback: a notification's provider_status (from status callbacks and event webhooks),
the index those callbacks find it by, and the suppression list, which the support group may view
and remove entries from."""

import django.db.models.deletion
import django.utils.timezone
from django.db import migrations, models

SUPPORT_GROUP = "support"
SUPPORT_PERMISSIONS = [("suppression", "view_suppression"), ("suppression", "delete_suppression")]


def grant_support(apps, schema_editor):
    # As in 0003: permissions are made by post_migrate, after every migration; make them now.
    from django.contrib.auth.management import create_permissions
    from django.contrib.contenttypes.management import create_contenttypes

    app_config = apps.get_app_config("notifications")
    app_config.models_module = True
    create_contenttypes(app_config, apps=apps, verbosity=0)
    create_permissions(app_config, apps=apps, verbosity=0)
    app_config.models_module = None

    Group = apps.get_model("auth", "Group")
    Permission = apps.get_model("auth", "Permission")
    group, _ = Group.objects.get_or_create(name=SUPPORT_GROUP)
    for model, codename in SUPPORT_PERMISSIONS:
        group.permissions.add(
            Permission.objects.get(content_type__app_label="notifications", content_type__model=model, codename=codename)
        )


def revoke_support(apps, schema_editor):
    Group = apps.get_model("auth", "Group")
    Permission = apps.get_model("auth", "Permission")
    group = Group.objects.filter(name=SUPPORT_GROUP).first()
    if group is not None:
        codenames = [codename for _, codename in SUPPORT_PERMISSIONS]
        group.permissions.remove(*Permission.objects.filter(content_type__app_label="notifications", codename__in=codenames))


class Migration(migrations.Migration):
    dependencies = [
        ("notifications", "0007_notification_address_index"),
        ("auth", "0012_alter_user_first_name_max_length"),
        ("contenttypes", "0002_remove_content_type_name"),
    ]

    operations = [
        migrations.AddField(
            model_name="notification",
            name="provider_status",
            field=models.CharField(
                blank=True,
                choices=[
                    ("sent", "Sent"),
                    ("delivered", "Delivered"),
                    ("undelivered", "Undelivered"),
                    ("bounced", "Bounced"),
                    ("complained", "Complained"),
                ],
                default="",
                help_text="What the provider reported after taking it (sent, delivered, undelivered, bounced, complained); blank until it reports.",
                max_length=16,
            ),
        ),
        migrations.AddField(
            model_name="notification",
            name="provider_status_at",
            field=models.DateTimeField(blank=True, help_text="When the provider status last changed.", null=True),
        ),
        migrations.AddIndex(
            model_name="notification",
            index=models.Index(fields=["provider_message_id"], name="notif_provider_message"),
        ),
        migrations.CreateModel(
            name="Suppression",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                (
                    "channel",
                    models.CharField(
                        choices=[("email", "Email"), ("sms", "Sms"), ("push", "Push"), ("webhook", "Webhook")], max_length=16
                    ),
                ),
                ("address", models.CharField(max_length=2000)),
                (
                    "reason",
                    models.CharField(
                        choices=[
                            ("bounced", "Bounced"),
                            ("complained", "Complained"),
                            ("unsubscribed_sms", "Unsubscribed Sms"),
                            ("unregistered", "Unregistered"),
                        ],
                        max_length=16,
                    ),
                ),
                ("created_at", models.DateTimeField(default=django.utils.timezone.now, editable=False)),
                (
                    "client",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE, related_name="suppressions", to="notifications.apiclient"
                    ),
                ),
                (
                    "notification",
                    models.ForeignKey(
                        blank=True,
                        null=True,
                        on_delete=django.db.models.deletion.SET_NULL,
                        related_name="+",
                        to="notifications.notification",
                    ),
                ),
            ],
            options={
                "ordering": ["-created_at", "-id"],
                "indexes": [
                    models.Index(fields=["client", "-created_at"], name="suppression_client_created"),
                    models.Index(fields=["address"], name="suppression_address"),
                ],
                "constraints": [
                    models.UniqueConstraint(fields=("client", "channel", "address"), name="suppression_unique_address"),
                ],
            },
        ),
        migrations.RunPython(grant_support, revoke_support),
    ]
