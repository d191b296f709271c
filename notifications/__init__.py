"""The notification platform's Django app: accept, deliver, retry and dead-letter notifications."""
