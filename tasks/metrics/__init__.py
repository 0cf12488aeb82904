"""Prometheus metrics: each process's own (serve.py) and the system-wide exporter's."""
