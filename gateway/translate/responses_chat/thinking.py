"""Where Anthropic's signed thinking rides while a Responses client holds the conversation.

On a Messages upstream (Responses → chat → Messages) the blocks a tool loop needs back
(``sealed_thinking.py``) ride in the ``encrypted_content`` of the reasoning item, the field
Responses has for reasoning a client cannot read and sends back as it came (Codex 0.169 does,
measured; so does every client that replays the output items it got). A request passed straight
to a Responses upstream has these items left out (``apis/responses/wire.py``): no OpenAI account
can read them. Only a composed request bound for Messages unseals it (``Target.onward``); on a
chat upstream it is dropped with the rest of ``encrypted_content``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gateway.translate import sealed_thinking
from gateway.translate.sealed_thinking import carried, seal

__all__ = ["carried", "seal", "unseal"]


def unseal(item: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The thinking blocks a reasoning item's ``encrypted_content`` carries; none when it is not
    the gateway's (OpenAI's own, or absent) or does not decode (then thinking is dropped for
    that loop, as before, rather than the request refused)."""
    return sealed_thinking.unseal(item.get("encrypted_content"))
