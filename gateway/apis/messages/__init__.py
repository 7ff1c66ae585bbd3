"""The messages wire API."""
