from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [
        ("notifications", "0011_broadcasts"),
    ]

    operations: list[migrations.operations.base.Operation] = []
