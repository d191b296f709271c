"""The inbox stage: one user's in-app inbox as a client's users see it — user tokens (signed,
expiring, revocable, dying with their client) and one-use stream tickets, marks and bulk marks,
the allowed origins — over the items delivery made.

Rule: may import intake/ and below (the demo page accepts through intake); nothing imports it but
the entry points and the facade."""

from .tokens import (
    MAX_TOKEN_TTL_SECONDS,
    TICKET_SECONDS,
    TOKEN_SALT,
    InboxUser,
    inbox_stream_ticket_issue,
    inbox_stream_ticket_redeem,
    inbox_token_issue,
    inbox_token_verify,
    inbox_tokens_revoke,
    inbox_user_holds,
)
from .user_inbox import (
    ACTIONS,
    BULK_ACTIONS,
    DEMO_CLIENT,
    DEMO_USERS,
    MAX_BULK_IDS,
    inbox_allowed_origins_set,
    inbox_demo_send,
    inbox_demo_token,
    inbox_item_mark,
    inbox_items_bulk_mark,
    origin_normalize,
)

__all__ = [
    "ACTIONS",
    "BULK_ACTIONS",
    "DEMO_CLIENT",
    "DEMO_USERS",
    "InboxUser",
    "MAX_BULK_IDS",
    "MAX_TOKEN_TTL_SECONDS",
    "TICKET_SECONDS",
    "TOKEN_SALT",
    "inbox_allowed_origins_set",
    "inbox_demo_send",
    "inbox_demo_token",
    "inbox_item_mark",
    "inbox_items_bulk_mark",
    "inbox_stream_ticket_issue",
    "inbox_stream_ticket_redeem",
    "inbox_token_issue",
    "inbox_token_verify",
    "inbox_tokens_revoke",
    "inbox_user_holds",
    "origin_normalize",
]
