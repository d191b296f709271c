"""Records: the rows every stage writes and nothing decides. The outbox (a notification's enqueued
state and its broker message), status events posted to a client's status webhook, and retention.

Rule: the bottom stage; imports no other stage of services (only selectors, channels, models,
conf and the modules below them)."""
