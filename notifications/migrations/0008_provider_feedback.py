from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [
        ("notifications", "0007_notification_address_index"),
    ]

    operations: list[migrations.operations.base.Operation] = []
