"""The responses wire API."""
