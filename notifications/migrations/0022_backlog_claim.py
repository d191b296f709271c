"""A backlog claim: each notification keeps its accept's traceparent, and a partial index finds each client's oldest due pending rows (issue #23)."""
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('notifications', '0021_outcome_counts'),
    ]

    operations = [
        migrations.AddField(
            model_name='notification',
            name='traceparent',
            field=models.CharField(blank=True, default='', max_length=55),
        ),
        migrations.AddIndex(
            model_name='notification',
            index=models.Index(condition=models.Q(('status__in', ['accepted', 'queued', 'retrying'])), fields=['channel', 'client', 'priority', 'next_attempt_at'], name='notif_pending_due'),
        ),
    ]
