"""What a notification says, fixed at accept: its message as given or rendered from a template in
the recipient's locale, and the unsubscribe link it carries."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

from ...conf import get_config
from ...errors import ValidationFailed
from ...locales import locale_normalize
from ...models import ApiClient, Category, Recipient, TemplateVariant
from .templates import template_render
from .unsubscribe import UnsubscribeTarget, list_unsubscribe_headers, unsubscribe_url

MAX_SUBJECT_LENGTH = 998  # Notification.subject; RFC 5322's line limit


@dataclass(frozen=True)
class NotificationContent:
    subject: str
    message: str
    html_message: str = ""
    template_key: str = ""
    locale: str = ""
    headers: dict[str, str] = field(default_factory=dict)

    def notification_fields(self) -> dict[str, Any]:
        """The content as the Notification fields of the same names, for building one."""
        return {name: getattr(self, name) for name in ("subject", "message", "html_message", "template_key", "locale", "headers")}


class ContentRequest(Protocol):
    """What a request asks to send: a notification's (accept.NotificationRequest) or a broadcast's."""

    @property
    def message(self) -> str: ...
    @property
    def subject(self) -> str: ...
    @property
    def template(self) -> str: ...
    @property
    def data(self) -> dict[str, Any]: ...
    @property
    def locale(self) -> str: ...


def requested_content(
    request: ContentRequest, *, client: ApiClient, recipient: Recipient | None, category: Category, user_id: str, channel: str
) -> NotificationContent:
    """notification_content of what ``request`` asks for (its message, or its template with data;
    its subject and locale), on ``channel`` for ``user_id``."""
    return notification_content(
        client=client,
        recipient=recipient,
        category=category,
        user_id=user_id,
        channel=channel,
        message=request.message,
        subject=request.subject,
        template=request.template,
        data=request.data,
        locale=request.locale,
    )


def notification_content(
    *,
    client: ApiClient,
    recipient: Recipient | None,
    category: Category,
    user_id: str,
    channel: str,
    message: str,
    subject: str,
    template: str,
    data: dict[str, Any],
    locale: str,
    variants: list[TemplateVariant] | None = None,
) -> NotificationContent:
    """The message to store and send: ``message`` as given, or exactly one of them, ``template``
    rendered with ``data`` (``subject`` still overrides). Every non-critical email carries the
    one-click unsubscribe headers; templates get the same link as ``unsubscribe_url`` ("" for a
    critical category, which nobody can opt out of). ``variants``: the template's variants of
    ``channel`` read already, by a caller building many notifications (services/policy/templates.py)."""
    if bool(message) == bool(template):
        field_name = "template" if message else "message"
        raise ValidationFailed("give either message, or template with data (not both)", extra={"field": field_name})
    if data and not template:
        raise ValidationFailed("data is for a template; give template too", extra={"field": "data"})
    link = ""
    if not category.critical and (template or channel == "email"):
        link = unsubscribe_url(UnsubscribeTarget(client_id=client.pk, user_id=user_id, category=category.key, channel=channel))
    headers = list_unsubscribe_headers(link) if link and channel == "email" else {}
    if not template:
        content = NotificationContent(subject=subject, message=message, headers=headers)
    else:
        rendered = template_render(
            client=client,
            key=template,
            channel=channel,
            locale=_locale(requested=locale, recipient=recipient),
            data={**data, "unsubscribe_url": link},
            variants=variants,
        )
        content = NotificationContent(
            subject=subject or rendered.subject,
            message=rendered.body,
            html_message=rendered.html_body,
            template_key=template,
            locale=rendered.locale,
            headers=headers,
        )
    if len(content.subject) > MAX_SUBJECT_LENGTH:
        raise ValidationFailed(f"the subject is over {MAX_SUBJECT_LENGTH} characters", extra={"field": "subject"})
    limit = get_config().max_message_bytes
    for name, text in (("message", content.message), ("html_message", content.html_message)):
        size = len(text.encode())
        if size > limit:
            raise ValidationFailed(
                f"{name} is {size} bytes; the limit is {limit}", extra={"field": "message" if not template else "data"}
            )
    return content


def _locale(*, requested: str, recipient: Recipient | None) -> str:
    """The request's locale, else the recipient's, else "" (DEFAULT_LOCALE). A recipient's locale
    stored in another spelling is normalised; one that is no locale at all is passed over."""
    if requested:
        return locale_normalize(requested)
    if recipient is not None and recipient.locale:
        try:
            return locale_normalize(recipient.locale)
        except ValidationFailed:
            return ""
    return ""
