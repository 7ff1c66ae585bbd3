"""llm-gateway: an OpenAI-compatible reverse proxy that classifies upstream errors,
retries each class by its own rule, and rescues conversations that overflow the
model's context window."""

__version__ = "0.1.0"
