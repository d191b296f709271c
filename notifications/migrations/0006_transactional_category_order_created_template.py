"""Seed data of templates and consent: the default category ``transactional`` (not critical,
enabled) and the platform template ``order_created`` that the order.created consumer renders
(it replaced templates/notifications/order_created.txt). Both are the platform's (no client)."""

from django.db import migrations

DEFAULT_CATEGORY = {"key": "transactional", "critical": False, "default_enabled": True}
ORDER_CREATED = "order_created"
ORDER_CREATED_SUBJECT = "Order #{{ order_id }} created"
ORDER_CREATED_BODY = "Order #{{ order_id }} created for project {{ project_id }}: {{ description }} — ${{ amount }}"
# The consumer sends on the event's channel, so every channel has a variant; en is DEFAULT_LOCALE's default.
ORDER_CREATED_VARIANTS = [
    {"channel": channel, "locale": "en", "subject": ORDER_CREATED_SUBJECT, "body": ORDER_CREATED_BODY}
    for channel in ("email", "sms", "push", "webhook")
]


def seed(apps, schema_editor):
    """Idempotent, so tests can put the rows back after a flush (tests/conftest.py)."""
    Category = apps.get_model("notifications", "Category")
    NotificationTemplate = apps.get_model("notifications", "NotificationTemplate")
    TemplateVariant = apps.get_model("notifications", "TemplateVariant")
    if not Category.objects.filter(client__isnull=True, key=DEFAULT_CATEGORY["key"]).exists():
        Category.objects.create(client=None, **DEFAULT_CATEGORY)
    if not NotificationTemplate.objects.filter(client__isnull=True, key=ORDER_CREATED).exists():
        template = NotificationTemplate.objects.create(client=None, key=ORDER_CREATED)
        TemplateVariant.objects.bulk_create(TemplateVariant(template=template, **variant) for variant in ORDER_CREATED_VARIANTS)


def unseed(apps, schema_editor):
    apps.get_model("notifications", "NotificationTemplate").objects.filter(client__isnull=True, key=ORDER_CREATED).delete()
    # The category stays if notifications refer to it (PROTECT); they would lose their category otherwise.
    Category = apps.get_model("notifications", "Category")
    Notification = apps.get_model("notifications", "Notification")
    unused = Category.objects.filter(client__isnull=True, key=DEFAULT_CATEGORY["key"])
    if not Notification.objects.filter(category__in=unused).exists():
        unused.delete()


class Migration(migrations.Migration):
    dependencies = [("notifications", "0005_templates_categories_consent")]

    operations = [migrations.RunPython(seed, unseed)]
