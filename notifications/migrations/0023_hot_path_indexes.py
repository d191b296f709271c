"""Less to write on each of a send's two updates (issue #23): indexes another index already leads
with are dropped (every non-HOT update of a row writes each index of its table again)."""

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('notifications', '0022_backlog_claim'),
    ]

    operations = [
        migrations.AlterField(
            model_name='deliveryattempt',
            name='notification',
            field=models.ForeignKey(db_index=False, on_delete=django.db.models.deletion.CASCADE, related_name='attempts', to='notifications.notification'),
        ),
        migrations.AlterField(
            model_name='notification',
            name='client',
            field=models.ForeignKey(db_index=False, on_delete=django.db.models.deletion.PROTECT, related_name='notifications', to='notifications.apiclient'),
        ),
        # Nothing reads by it (the admin's filters order by created_at: notif_status_created), and a
        # backlog claim's planner, with statistics from before a burst, took it over notif_pending_due.
        migrations.RemoveIndex(model_name='notification', name='notif_channel_status'),
    ]
