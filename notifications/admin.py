"""Admin classes for support staff; every action calls a service."""

from django.contrib import admin

from .models import ApiClient, DeadLetter, DeliveryAttempt, Notification, Recipient

admin.site.register([ApiClient, Recipient, Notification, DeliveryAttempt, DeadLetter])
