"""How many tools a translated chat completions request may carry.

OpenAI's chat completions API refuses more than 128: "Invalid 'tools': array too long. Expected
an array with maximum length 128, but got an array with length 325 instead." (param ``tools``,
code ``array_above_max_length``: vishalmysore/Tools4AI#16; Claude Code on gpt-5-mini through a
router, 129 tools, musistudio/claude-code-router#686). Azure OpenAI states the same cap ("Max
number of /chat completions tools: 128", learn.microsoft.com/azure/ai-services/openai/quotas-limits).
Servers that run models themselves (vLLM, llama.cpp) count none, so the cap is known by host
only, and a request over it is refused there alone: elsewhere the server's own answer decides.

A client that marks tools to be loaded later (Anthropic's ``defer_loading``, found by the
client's tool search) reaches any chat server without the ones not yet loaded once it would
carry more than 128: they are loaded as Anthropic's API would load them, by the tool search's
result (``messages_chat/request.py``). The Responses API's cap is not known (no refusal of a
long ``tools`` quoted in its own words): a Responses upstream is sent what the client gave.
"""

from __future__ import annotations

from functools import lru_cache
from urllib.parse import urlsplit

from gateway.config import AZURE_OPENAI_SUFFIX
from gateway.translate.base import Refusal

CHAT_MAX = 128
_CAPPED_HOSTS = frozenset({"api.openai.com"})


@lru_cache(maxsize=256)  # a few base URLs, asked once per translated request
def host_max(base_url: str) -> int | None:
    """The most tools a chat completions request to ``base_url`` may carry, where known."""
    try:
        host = urlsplit(base_url).hostname or ""
    except ValueError:
        return None
    return CHAT_MAX if host in _CAPPED_HOSTS or host.endswith(AZURE_OPENAI_SUFFIX) else None


def too_many(count: int, limit: int, way_out: str) -> Refusal:
    """The refusal of a request that still carries ``count`` tools, over ``limit``."""
    return Refusal(f"this request declares {count} tools; this upstream's chat completions API takes at most "
                   f"{limit} (OpenAI's and Azure OpenAI's cap) and would refuse it. {way_out}")  # fmt: skip
