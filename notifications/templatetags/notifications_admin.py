"""Template tags of the support admin: the system's health on the admin index."""

from __future__ import annotations

from django import template

from notifications import selectors

register = template.Library()


@register.simple_tag
def system_health() -> selectors.SystemHealth:
    return selectors.system_health(hours=24)
