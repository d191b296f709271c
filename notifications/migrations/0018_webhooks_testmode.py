"""Standard Webhooks secrets (the previous one signs during a rotation) and test mode: a client's
test mode as an ApiClient of its own (same name, is_test, live_client), and the messages its
notifications would have sent (CapturedMessage), which the support group may view."""

import django.db.models.deletion
import django.utils.timezone
from django.db import migrations, models

SUPPORT_GROUP = "support"
SUPPORT_PERMISSIONS = [("capturedmessage", "view_capturedmessage")]


def grant_support(apps, schema_editor):
    # As in 0008: permissions are made by post_migrate, after every migration; make them now.
    from django.contrib.auth.management import create_permissions
    from django.contrib.contenttypes.management import create_contenttypes

    app_config = apps.get_app_config("notifications")
    app_config.models_module = True
    create_contenttypes(app_config, apps=apps, verbosity=0)
    create_permissions(app_config, apps=apps, verbosity=0)
    app_config.models_module = None

    Group = apps.get_model("auth", "Group")
    Permission = apps.get_model("auth", "Permission")
    group, _ = Group.objects.get_or_create(name=SUPPORT_GROUP)
    for model, codename in SUPPORT_PERMISSIONS:
        group.permissions.add(
            Permission.objects.get(content_type__app_label="notifications", content_type__model=model, codename=codename)
        )


def revoke_support(apps, schema_editor):
    Group = apps.get_model("auth", "Group")
    Permission = apps.get_model("auth", "Permission")
    group = Group.objects.filter(name=SUPPORT_GROUP).first()
    if group is not None:
        codenames = [codename for _, codename in SUPPORT_PERMISSIONS]
        group.permissions.remove(*Permission.objects.filter(content_type__app_label="notifications", codename__in=codenames))


class Migration(migrations.Migration):

    dependencies = [
        ('notifications', '0015_client_limits'),
    ]

    operations = [
        migrations.CreateModel(
            name='CapturedMessage',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('channel', models.CharField(choices=[('email', 'Email'), ('sms', 'Sms'), ('push', 'Push'), ('webhook', 'Webhook')], max_length=16)),
                ('to', models.CharField(help_text='The email, phone, device token or URL it was for.', max_length=2000)),
                ('subject', models.CharField(blank=True, default='', max_length=998)),
                ('body', models.TextField(blank=True, default='')),
                ('html_body', models.TextField(blank=True, default='')),
                ('captured_at', models.DateTimeField(default=django.utils.timezone.now, editable=False)),
            ],
            options={
                'ordering': ['-captured_at', '-id'],
            },
        ),
        migrations.AlterModelOptions(
            name='apiclient',
            options={'ordering': ['name', 'is_test'], 'verbose_name': 'API client'},
        ),
        migrations.AddField(
            model_name='apiclient',
            name='is_test',
            field=models.BooleanField(default=False, editable=False, help_text='Test mode: sends nothing; captures each message.'),
        ),
        migrations.AddField(
            model_name='apiclient',
            name='live_client',
            field=models.OneToOneField(blank=True, editable=False, help_text='The live client this test mode belongs to.', null=True, on_delete=django.db.models.deletion.CASCADE, related_name='test_client', to='notifications.apiclient'),
        ),
        migrations.AddField(
            model_name='apiclient',
            name='webhook_secret_previous',
            field=models.CharField(blank=True, default='', editable=False, max_length=100),
        ),
        migrations.AddField(
            model_name='apiclient',
            name='webhook_secret_rotated_at',
            field=models.DateTimeField(blank=True, editable=False, null=True),
        ),
        migrations.AlterField(
            model_name='apiclient',
            name='name',
            field=models.CharField(max_length=100),
        ),
        migrations.AlterField(
            model_name='apiclient',
            name='token_prefix',
            field=models.CharField(editable=False, help_text='First characters of the token, to tell tokens apart.', max_length=16),
        ),
        migrations.AlterField(
            model_name='apiclient',
            name='webhook_secret',
            field=models.CharField(blank=True, default='', help_text='Signs webhook deliveries and status events (Standard Webhooks).', max_length=100),
        ),
        migrations.AddConstraint(
            model_name='apiclient',
            constraint=models.UniqueConstraint(condition=models.Q(('is_test', False)), fields=('name',), name='api_client_unique_live_name'),
        ),
        migrations.AddConstraint(
            model_name='apiclient',
            constraint=models.CheckConstraint(condition=models.Q(models.Q(('is_test', False), ('live_client__isnull', True)), models.Q(('is_test', True), ('live_client__isnull', False)), _connector='OR'), name='api_client_test_has_live_client'),
        ),
        migrations.AddField(
            model_name='capturedmessage',
            name='client',
            field=models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='captured_messages', to='notifications.apiclient'),
        ),
        migrations.AddField(
            model_name='capturedmessage',
            name='notification',
            field=models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='captured_messages', to='notifications.notification'),
        ),
        migrations.AddIndex(
            model_name='capturedmessage',
            index=models.Index(fields=['client', '-captured_at'], name='captured_client_captured'),
        ),
        migrations.RunPython(grant_support, revoke_support),
    ]
