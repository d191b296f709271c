"""Benchmarks of the delivery pipeline (``make bench``)."""
