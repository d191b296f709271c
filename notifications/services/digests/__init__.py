"""Digests: a recipient's notifications of one key gathered over a window and sent as one.
``join.py`` is the accept's step (a member joins or opens the open digest of its key); ``close.py``
makes the digest's one notification when its window ends or it is full.

Rule: may import delivery/, feedback/, policy/ and records/; knows nothing of intake/ (join reads a
request through a protocol of its own), so accept can call it in one step."""
