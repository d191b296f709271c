"""Per-client limits on the API client: subscribers per topic and broadcasts per hour (issue #22)."""

import django.core.validators
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("notifications", "0014_render_failures"),
    ]

    operations = [
        migrations.AddField(
            model_name="apiclient",
            name="topic_subscribers_max",
            field=models.PositiveIntegerField(
                blank=True,
                help_text="Subscribers one topic may have. Empty: TOPIC_SUBSCRIBERS_MAX (default 1,000,000).",
                null=True,
                validators=[django.core.validators.MinValueValidator(1)],
            ),
        ),
        migrations.AddField(
            model_name="apiclient",
            name="broadcasts_per_hour_max",
            field=models.PositiveIntegerField(
                blank=True,
                help_text="Broadcasts started in any hour. Empty: BROADCASTS_PER_HOUR_MAX (default 100).",
                null=True,
                validators=[django.core.validators.MinValueValidator(1)],
            ),
        ),
    ]
