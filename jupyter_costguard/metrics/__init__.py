"""Prometheus: the collector on jupyter_server's /metrics and the Pushgateway client for jobs."""
