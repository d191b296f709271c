from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [
        ("notifications", "0008_provider_feedback"),
    ]

    operations: list[migrations.operations.base.Operation] = []
