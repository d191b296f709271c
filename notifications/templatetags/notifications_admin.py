"""Template tags of the support admin: the system's health on the admin index."""

from __future__ import annotations

from django import template

from notifications import selectors
from notifications.services.delivery.failover import ProviderCircuit, provider_circuits_open

register = template.Library()


@register.simple_tag
def system_health() -> selectors.SystemHealth:
    return selectors.system_health(hours=24)


@register.simple_tag
def open_circuits() -> list[ProviderCircuit]:
    """Provider accounts whose circuit breaker is open: their sends go to the next account."""
    return provider_circuits_open()
