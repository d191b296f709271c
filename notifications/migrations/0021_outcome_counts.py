"""The admin dashboard's counters (OutcomeCount) and each notification's failure reason (issue #25 item 4).

Adding the column with a constant default is a catalogue change on PostgreSQL 11+, not a rewrite of
the notifications table. The counters start empty: `manage.py outcome_counts_rebuild` fills them
from the notifications already stored.
"""

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('notifications', '0020_captured_message_in_app'),
    ]

    operations = [
        migrations.AddField(
            model_name='notification',
            name='failure_reason',
            field=models.CharField(blank=True, default='', help_text="Why it failed or is dead: the error's code (and HTTP status), as the dashboard counts it; blank otherwise.", max_length=64),
        ),
        migrations.CreateModel(
            name='OutcomeCount',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('hour', models.DateTimeField(help_text="The notifications' created_at, to the hour (UTC).")),
                ('channel', models.CharField(max_length=16)),
                ('account', models.CharField(blank=True, default='', help_text="The provider account that ended them; blank: the channel's only one.", max_length=255)),
                ('status', models.CharField(max_length=16)),
                ('reason', models.CharField(blank=True, default='', help_text="Why they failed (the error's code); blank for deliveries.", max_length=64)),
                ('latency_le_ms', models.IntegerField(default=0, help_text="A delivery's accept-to-delivered bucket: at most this many ms (0 for failures).")),
                ('count', models.BigIntegerField(default=0)),
            ],
            options={
                'constraints': [models.UniqueConstraint(fields=('hour', 'channel', 'account', 'status', 'reason', 'latency_le_ms'), name='outcome_count_key')],
            },
        ),
    ]
