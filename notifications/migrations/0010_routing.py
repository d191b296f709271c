from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [
        ("notifications", "0009_status_webhooks"),
    ]

    operations: list[migrations.operations.base.Operation] = []
