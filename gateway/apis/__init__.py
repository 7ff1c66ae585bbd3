"""The wire APIs the gateway speaks; see ``base.py`` for what a dialect owns."""

from __future__ import annotations

from gateway.apis.base import Dialect
from gateway.apis.chat.wire import OpenAIChat
from gateway.apis.messages.wire import AnthropicMessages
from gateway.apis.responses.wire import OpenAIResponses

OPENAI_CHAT: Dialect = OpenAIChat()
ANTHROPIC_MESSAGES: Dialect = AnthropicMessages()
OPENAI_RESPONSES: Dialect = OpenAIResponses()

# Each gets the full pipeline at its path.
DIALECTS: tuple[Dialect, ...] = (OPENAI_CHAT, ANTHROPIC_MESSAGES, OPENAI_RESPONSES)


def dialect_for_errors(path: str, headers_have_anthropic_version: bool) -> Dialect:
    """Which envelope a gateway-made error takes on a path without a full dialect:
    Anthropic clients always send ``anthropic-version``, and read only Anthropic's shape."""
    if path.startswith("/v1/messages") or headers_have_anthropic_version:
        return ANTHROPIC_MESSAGES
    return OPENAI_CHAT
