"""The ``support`` group: may view notifications, their attempts, dead letters and recipients,
and retry or discard dead letters; nothing else."""

from django.db import migrations

SUPPORT_GROUP = "support"
SUPPORT_PERMISSIONS = [
    ("notification", "view_notification"),
    ("deliveryattempt", "view_deliveryattempt"),
    ("deadletter", "view_deadletter"),
    ("deadletter", "retry_deadletter"),
    ("recipient", "view_recipient"),
]


def create_support_group(apps, schema_editor):
    # Permissions are normally made by post_migrate, after every migration; make them now so the
    # group can be given them on a fresh database too.
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


def remove_support_group(apps, schema_editor):
    apps.get_model("auth", "Group").objects.filter(name=SUPPORT_GROUP).delete()


class Migration(migrations.Migration):
    dependencies = [
        ("notifications", "0002_processed_event"),
        ("auth", "0012_alter_user_first_name_max_length"),
        ("contenttypes", "0002_remove_content_type_name"),
    ]

    operations = [migrations.RunPython(create_support_group, remove_support_group)]
