"""Message templates: variants per (channel, locale) in the Django template language, checked when
saved, rendered at accept from the request's ``data``, previewed, and sent as a test."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from django.db import IntegrityError, transaction

from ...channels import CHANNEL_NAMES, OutgoingMessage, SendResult, validate_address
from ...channels.providers import get_provider
from ...conf import get_config
from ...errors import ValidationFailed
from ...locales import locale_fallbacks, locale_normalize
from ...models import ApiClient, NotificationTemplate, TemplateVariant
from ...selectors import template_variants_for
from .preferences import key_check
from .render_sandbox import template_job_run
from .template_budget import render_budget
from .template_render import PartsRender, SourceCheck

MAX_VARIANTS = 100
VARIANT_FIELDS = ("channel", "locale", "subject", "body", "html_body")


@dataclass(frozen=True)
class RenderedMessage:
    subject: str
    body: str
    html_body: str
    template_key: str = ""
    locale: str = ""


# --- Saving -------------------------------------------------------------------------------------


def template_owner(client_id: int | None) -> str:
    """Whose template work it is, for the render sandbox's turns: a client's, or the platform's."""
    return "platform" if client_id is None else f"client:{client_id}"


def template_source_check(source: str, *, field: str, owner: str) -> None:
    """ValidationFailed naming ``field`` when ``source`` does not compile, or uses what a template
    may not (template_bounds: its tags, filters, widths, counts, loops and nesting); checked in
    the render sandbox when it is on, since compiling is work a hostile source makes too."""
    template_job_run(SourceCheck(source=source, field=field), owner=owner)


def template_variants_check(variants: Any, *, owner: str) -> list[dict[str, str]]:
    """The variants of a template, checked: a known channel, a locale, one variant per (channel,
    locale), a one-line subject, a body, HTML for email only, and each part compiling."""
    if not isinstance(variants, list) or not 1 <= len(variants) <= MAX_VARIANTS:
        raise ValidationFailed(f"variants is a list of 1 to {MAX_VARIANTS} variants", extra={"field": "variants"})
    checked: list[dict[str, str]] = []
    seen: set[tuple[str, str]] = set()
    for index, variant in enumerate(variants):
        field = f"variants[{index}]"
        if not isinstance(variant, dict):
            raise ValidationFailed(f"{field} is an object", extra={"field": field})
        for name, value in variant.items():
            if name not in VARIANT_FIELDS:
                raise ValidationFailed(
                    f"{field}.{name} is not a field; expected {', '.join(VARIANT_FIELDS)}", extra={"field": f"{field}.{name}"}
                )
            if not isinstance(value, str):
                raise ValidationFailed(f"{field}.{name} must be a string", extra={"field": f"{field}.{name}"})
        channel = variant.get("channel")
        if channel not in CHANNEL_NAMES:
            raise ValidationFailed(f"{field}.channel is one of {', '.join(CHANNEL_NAMES)}", extra={"field": f"{field}.channel"})
        locale = locale_normalize(str(variant.get("locale") or ""), field=f"{field}.locale")
        if (channel, locale.lower()) in seen:
            raise ValidationFailed(f"{field}: a second {channel} variant in {locale}", extra={"field": f"{field}.locale"})
        seen.add((channel, locale.lower()))
        subject, body, html_body = (str(variant.get(name) or "") for name in ("subject", "body", "html_body"))
        if "\r" in subject or "\n" in subject or len(subject) > 998:
            raise ValidationFailed(f"{field}.subject is one line of at most 998 characters", extra={"field": f"{field}.subject"})
        if not body.strip():
            raise ValidationFailed(f"{field}.body may not be empty", extra={"field": f"{field}.body"})
        if html_body and channel != "email":
            raise ValidationFailed(f"{field}.html_body is for email only", extra={"field": f"{field}.html_body"})
        for name, source in (("subject", subject), ("body", body), ("html_body", html_body)):
            template_source_check(source, field=f"{field}.{name}", owner=owner)
        checked.append({"channel": channel, "locale": locale, "subject": subject, "body": body, "html_body": html_body})
    return checked


def template_replace(*, client: ApiClient, key: str, variants: Any) -> tuple[NotificationTemplate, bool]:
    """Create the client's template ``key`` or replace all its variants; True when created."""
    key_check(key, field="template", max_length=100)
    checked = template_variants_check(variants, owner=template_owner(client.pk))
    with transaction.atomic():
        template = NotificationTemplate.objects.select_for_update().filter(client=client, key=key).first()
        created = template is None
        if template is None:
            try:
                with transaction.atomic():
                    template = NotificationTemplate.objects.create(client=client, key=key)
            except IntegrityError:  # a concurrent PUT of the same new key made it first
                template = NotificationTemplate.objects.select_for_update().get(client=client, key=key)
                created = False
        else:
            template.variants.all().delete()
            template.save(update_fields=["updated_at"])
        TemplateVariant.objects.bulk_create(TemplateVariant(template=template, **variant) for variant in checked)
    return template, created


# --- Rendering ----------------------------------------------------------------------------------


def variant_pick(variants: Iterable[TemplateVariant], *, key: str, channel: str, locale: str) -> TemplateVariant:
    """The variant of ``channel`` in the most specific locale available: ``fr-CA``, ``fr``, then
    DEFAULT_LOCALE; ValidationFailed when the template has none of them."""
    of_channel = {variant.locale.lower(): variant for variant in variants if variant.channel == channel}
    if not of_channel:
        raise ValidationFailed(f"template {key!r} has no {channel} variant", extra={"field": "template"})
    chain = locale_fallbacks(locale, default=get_config().default_locale)
    for candidate in chain:
        if candidate.lower() in of_channel:
            return of_channel[candidate.lower()]
    raise ValidationFailed(
        f"template {key!r} has no {channel} variant in {', '.join(chain)} "
        f"(it has {', '.join(sorted(v.locale for v in of_channel.values()))})",
        extra={"field": "locale"},
    )


def variant_render(variant: TemplateVariant, *, key: str, data: dict[str, Any], owner: str) -> RenderedMessage:
    """Render a variant with ``data``: text parts without escaping, the HTML part autoescaped. A
    variable a part uses that ``data`` lacks is ValidationFailed naming it (``data.<name>``). The
    render stops itself at TEMPLATE_RENDER_SECONDS of work for the three parts, or a part's output
    past MAX_MESSAGE_BYTES: RenderLimitExceeded (a ValidationFailed), with nothing left running;
    in the render sandbox when it is on (render_sandbox), which also stops what the budget misses."""
    config = get_config()
    with render_budget(seconds=config.template_render_seconds, max_bytes=config.max_message_bytes) as budget:
        job = PartsRender(
            sources=[variant.subject, variant.body, variant.html_body],
            html=[False, False, True],
            data=data,
            seconds=budget.seconds,
            remaining_seconds=max(budget.deadline - time.monotonic(), 0.0),
            max_bytes=budget.max_bytes,
            what=budget.what,
        )
        subject, body, html_body = template_job_run(job, owner=owner)
    return RenderedMessage(
        # Folded to one line: a value with a line break must not become a second header.
        subject=" ".join(subject.split()),
        body=body,
        html_body=html_body,
        template_key=key,
        locale=variant.locale,
    )


def template_variants_read(*, client: ApiClient, key: str, channel: str) -> list[TemplateVariant]:
    """The ``channel`` variants of the client's template ``key`` (or the platform's of that key);
    ValidationFailed for an unknown template."""
    variants = template_variants_for(client=client, key=key, channel=channel)
    if variants is None:
        raise ValidationFailed(f"unknown template {key!r}", extra={"field": "template"})
    return variants


def template_render(
    *,
    client: ApiClient,
    key: str,
    channel: str,
    locale: str,
    data: dict[str, Any],
    variants: Iterable[TemplateVariant] | None = None,
) -> RenderedMessage:
    """Render the client's template ``key`` (or the platform's of that key) for ``channel`` in the
    best locale; ValidationFailed for an unknown template, no variant, or a missing variable.
    ``variants``: its ``channel`` variants read already (template_variants_read), by a caller that
    renders it for many recipients (a broadcast's batch); else they are read here."""
    if variants is None:
        variants = template_variants_read(client=client, key=key, channel=channel)
    variant = variant_pick(variants, key=key, channel=channel, locale=locale)
    return variant_render(variant, key=key, data=data, owner=template_owner(client.pk))


def template_preview(*, client: ApiClient, key: str, channel: str, locale: str, data: dict[str, Any]) -> RenderedMessage:
    """What ``template_render`` would send; ``unsubscribe_url`` is a sample unless ``data`` has one."""
    locale = locale_normalize(locale) if locale else ""
    return template_render(client=client, key=key, channel=channel, locale=locale, data=preview_data(data))


def preview_data(data: dict[str, Any]) -> dict[str, Any]:
    return {"unsubscribe_url": f"{get_config().public_base_url}/u/preview", **data}


def template_variant_preview(
    *, template: NotificationTemplate, channel: str, locale: str, data: dict[str, Any]
) -> RenderedMessage:
    """A template's ``channel`` variant in ``locale`` (or its fallback) rendered with sample ``data``."""
    variant = variant_pick(template.variants.all(), key=template.key, channel=channel, locale=locale)
    return variant_render(variant, key=template.key, data=preview_data(data), owner=template_owner(template.client_id))


def template_send_test(
    *, template: NotificationTemplate, channel: str, locale: str, data: dict[str, Any], to: str
) -> tuple[RenderedMessage, SendResult]:
    """Render ``template`` and hand it straight to the channel's provider, addressed to ``to``: a
    person checking a template, not a notification (no row, no retries). Raises ValidationFailed,
    or the provider's TransientChannelError / PermanentChannelError."""
    address = validate_address(channel, to, field="to")
    rendered = template_variant_preview(template=template, channel=channel, locale=locale, data=data)
    message = OutgoingMessage(
        notification_id=f"test-{uuid.uuid4()}",
        channel=channel,
        address=address,
        subject=rendered.subject,
        body=rendered.body,
        html_body=rendered.html_body,
        metadata={"template": template.key, "test": True},
    )
    return rendered, get_provider(channel).send(message)
