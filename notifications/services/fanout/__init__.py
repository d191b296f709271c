"""Fan-out: one request to many recipients. Topics and their subscribers; a broadcast accepted
once, then fanned out to every subscriber in batches of notifications.

Rule: may import intake/ (a broadcast's notifications are built as an accept builds one) and
everything below it; only the sweeper and the facade import fanout/."""
