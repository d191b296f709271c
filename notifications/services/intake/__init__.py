"""Intake: what clients put in. API clients and their recipients registered; a notification
accepted once per idempotency key, alone, in a batch, in a web process's group commit, or from a
domain event. Accept is one pipeline (``accept.py``): recipient, address or route, content,
consent, cap, digest, write.

Rule: may import digests/, delivery/, feedback/, policy/ and records/; nothing imports intake/ but
fanout/, the sweeper and the facade (``services/__init__.py``)."""
