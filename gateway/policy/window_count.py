"""What a pool deployment's tokens window counted of a call it answered, read from the answer's
usage: the count the pool keeps for that call in place of its estimate (state/pools.py ``used``).
The providers count differently:

* Azure OpenAI counts a request at admission and not again: "TPM rate limits are based on the
  maximum tokens estimated to be processed when the request is received", from the prompt, the
  ``max_tokens`` and the ``best_of`` setting, "added to a running token count of all requests,
  which resets every minute", and "different than the token count used for billing"
  (learn.microsoft.com/azure/ai-services/openai/how-to/quota, "Understanding rate limits").
  A short answer gives back none of its ``max_tokens``: counted at its usage, an Azure
  deployment looked to have room it had not, and was sent calls it refused. So its count is
  the prompt and the ``max_tokens`` sent, never less than the usage (a call that named none).
  (``best_of`` is the legacy completions API's; no API the gateway sends there has it.)
* Anthropic's input tokens per minute count the input and the cache writes, not the cache
  reads ("cache_read_input_tokens" do not count towards ITPM for most models, its rate-limits
  page, platform.claude.com/docs/en/api/rate-limits), and its output tokens go to a window of
  their own (OTPM). A Messages answer's ``prompt`` holds its cache reads (apis/messages/wire.py),
  and a Claude Code turn reads nearly all of its prompt from the cache: counted whole, with its
  output, one turn took the ITPM of many. So its count is the uncached input alone, the measure
  the call's estimate (its prompt) stood for; its output is left to the readings of OTPM.
  Anthropic's own API only (``api.anthropic.com``): the other Messages servers (DeepSeek's,
  MiniMax's and Moonshot's ``/anthropic`` endpoints, vLLM's) say nothing of such windows, and a
  ``tokens_per_minute`` configured for them, counting no output, was overshot by every answer.
* Else (OpenAI and the servers that copy its headers): the prompt and the output, one window.

Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping


def counted(usage: Mapping[str, int], *, azure: bool, anthropic: bool, api: str,
            sent_output: int | None) -> int | None:  # fmt: skip
    """The tokens the deployment's window holds for the answered call; None when the usage
    states no prompt or no output (then nothing replaces the estimate). ``azure``: an Azure
    OpenAI deployment; ``anthropic``: one of Anthropic's own API (``config.ANTHROPIC_HOST``);
    ``api``: the API the call was sent in; ``sent_output``: the output budget it named (Azure's
    only)."""
    prompt, completion = usage.get("prompt"), usage.get("completion")
    if prompt is None or completion is None:
        return None
    if azure:
        return prompt + max(completion, sent_output or 0)
    if anthropic and api == "messages":
        return max(0, prompt - usage.get("cache_read", 0))
    return prompt + completion
