"""The alert store: what the guard raises, the API changes and the service publishes."""
