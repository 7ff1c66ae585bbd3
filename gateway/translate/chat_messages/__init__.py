"""OpenAI chat completions clients on an Anthropic Messages upstream: ``request.py`` carries
the request (and holds the translator), ``answer.py`` the buffered answer and the stream back.
What is carried, dropped or refused: docs/translation/chat_messages.md."""

from gateway.translate.chat_messages.request import BUFFERED_MAX_TOKENS, ChatToMessages, default_max_tokens

__all__ = ["BUFFERED_MAX_TOKENS", "ChatToMessages", "default_max_tokens"]
