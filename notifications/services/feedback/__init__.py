"""Feedback: what providers report after a send (delivered, bounced, complained, STOP), parsed and
verified by the channel's own feedback module, recorded here as the notification's provider status
and, where it says so, a suppression.

Rule: may import policy/ and records/; independent of delivery/ (neither imports the other)."""
