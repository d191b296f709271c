"""drf-spectacular's settings: what /api/schema/ and /api/docs/ say about the API as a whole (its
title, how to authenticate, the tags every operation is filed under) and where the docs pages'
own files come from."""

API_DOCS_SETTINGS = {
    "TITLE": "Notification platform API",
    "DESCRIPTION": "Accept, track and cancel email, SMS, push and webhook notifications.\n\n"
    "Every /api/v1/ call but the providers' carries `Authorization: Bearer <token>`, a token an operator makes with "
    '`manage.py create_api_client <name>`. Every error answers `{"error": {"code", "message", "field", '
    '"details"}}`; a 429 or 503 says in Retry-After when to try again. Each request example here can be sent as it '
    "is once what it names exists (the recipient user-42, the template welcome, the topic product-news).",
    "VERSION": "1.0.0",
    "SERVE_INCLUDE_SCHEMA": False,
    "SERVE_PERMISSIONS": ["rest_framework.permissions.AllowAny"],
    "SERVE_AUTHENTICATION": [],
    "COMPONENT_SPLIT_REQUEST": True,
    # The inbox's live stream is a plain async view: its operation is written by this hook.
    "POSTPROCESSING_HOOKS": [
        "drf_spectacular.hooks.postprocess_schema_enums",
        "notifications.api.inbox.stream_schema.stream_schema_hook",
    ],
    # Every operation sits under one of these (notifications/api/schema.py api_operation files an
    # operation under the tag its operation_id starts with), shown in this order in /api/docs/.
    "TAGS": [
        {"name": "notifications", "description": "Send one notification (or a batch), follow it, cancel it."},
        {
            "name": "recipients",
            "description": "The people you notify, by your own user_id: their addresses, locale, timezone, quiet hours "
            "and preferences; the one-click unsubscribe link of their emails.",
        },
        {"name": "templates", "description": "Messages written once per channel and locale, rendered with data."},
        {
            "name": "categories",
            "description": "What a notification is about: opt-in or opt-out by default, critical or not, capped per recipient.",
        },
        {"name": "topics", "description": "Named lists of your recipients that a broadcast goes to."},
        {"name": "broadcasts", "description": "One message to every subscriber of a topic, and its progress."},
        {"name": "suppressions", "description": "Addresses not sent to after a hard bounce, a complaint or a STOP."},
        {
            "name": "inbox",
            "description": "The in-app inbox: user tokens (with your client token), then one user's feed, counts, marks "
            "and live stream (with that user's token).",
        },
        {"name": "client", "description": "Your API client: its status webhook and the secret that signs it."},
        {
            "name": "test",
            "description": "Test mode (a test token, ntf_test_...): the messages its notifications would have sent, captured.",
        },
        {
            "name": "providers",
            "description": "Delivery status from the providers (Twilio, Mailgun), signed by them; not for API clients.",
        },
        {"name": "health", "description": "Liveness and readiness probes, without a token."},
    ],
    # Swagger UI and ReDoc from our own static files: pinned, and working without the internet.
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    # Named, not hashed: a broadcast's status is another choice set than a notification's.
    "ENUM_NAME_OVERRIDES": {
        "BroadcastStatusEnum": "notifications.models.broadcasts.BroadcastStatus",
        "NotificationStatusEnum": "notifications.models.notifications.Status",
        "ChannelEnum": "notifications.models.content.Channel",
    },
}
