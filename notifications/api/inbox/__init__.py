"""The inbox API, for one user of a client with that user's token: the feed, counts, marks, the
live stream (an async view, served over ASGI) and the demo page; user tokens are issued with the
client's token (views.InboxTokensView)."""
