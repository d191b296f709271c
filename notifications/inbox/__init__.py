"""The in-app inbox's storage and live wake-ups, below the services: ``store`` writes items with
their counters and events in one transaction (the in_app provider and the services call it),
``live`` wakes the streams of a user (or of a client's users) in every process, ``slots`` caps the
streams open. Imports models, sql, conf, connections, degraded and concurrency only."""
