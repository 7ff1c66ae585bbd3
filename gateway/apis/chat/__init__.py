"""The chat wire API."""
