"""Feedback: what providers report after a send (delivered, bounced, complained, STOP), parsed and
verified by the channel's own feedback module, recorded here as the notification's provider status
and, where it says so, a suppression.

Rule: may import policy/ and records/, never delivery/; delivery/ records through it a status a
provider reports with its answer (the test mode's capture sink)."""
