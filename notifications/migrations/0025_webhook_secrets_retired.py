"""Every webhook secret rotated out within its grace period keeps signing, not only the last one:
the previous secret becomes the first of a list, each with the moment it was retired."""

from django.db import migrations, models


def previous_into_retired(apps, schema_editor):
    ApiClient = apps.get_model("notifications", "ApiClient")
    for client in ApiClient.objects.exclude(webhook_secret_previous="").exclude(webhook_secret_rotated_at=None):
        client.webhook_secrets_retired = [[client.webhook_secret_previous, client.webhook_secret_rotated_at.timestamp()]]
        client.save(update_fields=["webhook_secrets_retired"])


class Migration(migrations.Migration):
    dependencies = [
        ("notifications", "0024_outcome_count_shards"),
    ]

    operations = [
        migrations.AddField(
            model_name="apiclient",
            name="webhook_secrets_retired",
            field=models.JSONField(blank=True, default=list, editable=False),
        ),
        migrations.RunPython(previous_into_retired, migrations.RunPython.noop),
        migrations.RemoveField(
            model_name="apiclient",
            name="webhook_secret_previous",
        ),
    ]
