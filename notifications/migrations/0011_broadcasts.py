from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [
        ("notifications", "0010_routing"),
    ]

    operations: list[migrations.operations.base.Operation] = []
