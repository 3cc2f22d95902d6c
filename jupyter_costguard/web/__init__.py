"""The REST API under {base_url}costguard/api/: thin handlers over the services."""
