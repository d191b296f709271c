"""The dashboard's counters spread over rows a worker thread each (issue #23): threads recording at once no longer queue on one row's lock."""

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('notifications', '0023_hot_path_indexes'),
    ]

    operations = [
        migrations.RemoveConstraint(
            model_name='outcomecount',
            name='outcome_count_key',
        ),
        migrations.AddField(
            model_name='outcomecount',
            name='shard',
            field=models.PositiveSmallIntegerField(default=0),
        ),
        migrations.AddConstraint(
            model_name='outcomecount',
            constraint=models.UniqueConstraint(fields=('hour', 'channel', 'account', 'status', 'reason', 'latency_le_ms', 'shard'), name='outcome_count_key'),
        ),
    ]
