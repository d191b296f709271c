"""Delivery: a pending notification claimed, withheld (send-time consent), or sent through its
channel's provider with failover between provider accounts (or, for a test token, the capture
sink); its outcome recorded (retry, the next
channel of its route, or a dead letter).

Rule: may import feedback/, policy/ and records/; never intake/, digests/ or fanout/ (they hand work to
delivery through the outbox)."""
