from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("notifications", "0009_status_webhooks"),
    ]

    operations: list[migrations.operations.base.Operation] = [
        migrations.AddField(
            model_name="notification",
            name="route",
            field=models.JSONField(blank=True, default=list),
        ),
        migrations.AddField(
            model_name="deliveryattempt",
            name="channel",
            field=models.CharField(blank=True, default="", max_length=16),
        ),
        migrations.AddField(
            model_name="deliveryattempt",
            name="account",
            field=models.CharField(blank=True, default="", max_length=255),
        ),
    ]
