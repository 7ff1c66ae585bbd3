"""The numbers a provider's overflow message gives: the limit and how big the request was.

Each pattern is the provider's own wording (see the overflow cases in ``tests/corpus/``).
Unknown numbers stay None; ``compress`` falls back to the upstream's ``context_window``
and then to an estimate.
"""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class OverflowLimits:
    limit: int | None = None  # the model's context window, in tokens
    prompt: int | None = None  # the provider's count of the input we sent
    completion: int | None = None  # the completion budget it counted against the limit


_N = r"([\d,]+)"

# (pattern, the group numbers of limit, prompt, completion) — 0 means "not in this wording".
_PATTERNS: tuple[tuple[re.Pattern[str], int, int, int], ...] = tuple(
    (re.compile(p, re.IGNORECASE | re.DOTALL), lim, prompt, comp)
    for p, lim, prompt, comp in (
        # OpenAI / Azure / DeepSeek / vLLM: "... is L tokens. However, you requested T tokens (P in the messages, C in the completion)"
        (rf"maximum context length is {_N} tokens\. However, you requested (?:about )?{_N} tokens \({_N} in the messages, {_N} in the completion\)", 1, 3, 4),
        # OpenRouter: "... you requested about T tokens (P of text input, C in the output)"
        (rf"maximum context length is {_N} tokens\. However, you requested about {_N} tokens \({_N} of text input.*?{_N} in the output\)", 1, 3, 4),
        # OpenAI: "... However, your messages resulted in P tokens"
        (rf"maximum context length is {_N} tokens\. However, (?:your messages resulted in|you requested) (?:about )?{_N} tokens", 1, 2, 0),
        # vLLM: "maximum context length is L tokens and your request has P input tokens"
        (rf"maximum context length is {_N} tokens and your request has {_N} input tokens", 1, 2, 0),
        # Anthropic: "prompt is too long: P tokens > L maximum"
        (rf"prompt is too long: {_N} tokens > {_N} maximum", 2, 1, 0),
        # Anthropic: "input length and `max_tokens` exceed context limit: P + C > L"
        (rf"exceed context limit: {_N} \+ {_N} > {_N}", 3, 1, 2),
        # vLLM (newer): "prompt (length P) is longer than the maximum model length of L"
        (rf"\(length {_N}\) is longer than the maximum model length of {_N}", 2, 1, 0),
        # llama.cpp: "request (P tokens) exceeds the available context size (L tokens)"
        (rf"\({_N} tokens\) exceeds the available context size \({_N} tokens\)", 2, 1, 0),
        # Gemini: "The input token count (P) exceeds the maximum number of tokens allowed (L)"
        (rf"input token count \({_N}\) exceeds the maximum number of tokens allowed \({_N}\)", 2, 1, 0),
        # Vertex AI: "the input token count is P but model only supports up to L"
        (rf"input token count is {_N} but model only supports up to {_N}", 2, 1, 0),
        # Mistral: "Prompt contains P tokens ... too large for model with L maximum context length"
        (rf"contains {_N} tokens.*?too large for model with {_N} maximum context length", 2, 1, 0),
        # TGI / Together: "must be <= L. Given: P `inputs` tokens and C `max_new_tokens`"
        (rf"must be <= {_N}\. Given: {_N} `inputs` tokens and {_N} `max_new_tokens`", 1, 2, 3),
        # TGI ValidationError::InputLength: "`inputs` must have less than L tokens. Given: P"
        (rf"must have less than {_N} tokens\. Given: {_N}", 1, 2, 0),
        # SiliconFlow: "length of prompt_tokens (P) must be less than max_seq_len (L)"
        (rf"length of prompt_tokens \({_N}\) must be less than max_seq_len \({_N}\)", 2, 1, 0),
        # Cohere: "total number of tokens in the prompt cannot exceed L - received P"
        (rf"prompt cannot exceed {_N} - received {_N}", 1, 2, 0),
        # xAI: "maximum prompt length is L but the request contains P tokens"
        (rf"maximum prompt length is {_N} but the request contains {_N} tokens", 1, 2, 0),
        # Fireworks: "The prompt is too long: P, model maximum context length: L"
        (rf"prompt is too long: {_N}, model maximum context length: {_N}", 2, 1, 0),
        # Kimi: "exceeded model token limit: L (requested: P)"
        (rf"exceeded model token limit: {_N} \(requested: {_N}\)", 1, 2, 0),
        # Groq 413: "... tokens per minute (TPM): Limit L, Requested P"
        (rf"Limit {_N}, Requested {_N}", 1, 2, 0),
        # LM Studio: "Reached context length of L tokens with model (arch: ...) that does not ..."
        (rf"Reached context length of {_N} tokens", 1, 0, 0),
        # SambaNova: "The provided prompt is P tokens long, so generating C tokens requires a
        # sequence length of P+C, but the maximum supported sequence length is just L!"
        (rf"provided prompt is {_N} tokens long, so generating {_N} tokens requires a sequence length of [\d,]+, but the maximum supported sequence length is just {_N}", 3, 1, 2),
        # DeepInfra: "Requested input length P exceeds maximum input length L"
        (rf"Requested input length {_N} exceeds maximum input length {_N}", 2, 1, 0),
        # llama-cpp-python: "Prompt exceeds n_ctx: N > L", N counting only up to the part of the
        # prompt that did not fit, so not the prompt's size
        (rf"Prompt exceeds n_ctx: [\d,]+ > {_N}", 1, 0, 0),
        # Generic: "... is L tokens" with no request size
        (rf"maximum context length is {_N} tokens", 1, 0, 0),
    )
)


def _int(text: str | None) -> int | None:
    if not text:
        return None
    try:
        value = int(text.replace(",", ""))
    except ValueError:
        return None
    return value if value > 0 else None


def parse_overflow(message: str | None) -> OverflowLimits:
    if not message:
        return OverflowLimits()
    text = message[:8192]
    for pattern, lim, prompt, comp in _PATTERNS:
        m = pattern.search(text)
        if m:
            return OverflowLimits(
                limit=_int(m.group(lim)) if lim else None,
                prompt=_int(m.group(prompt)) if prompt else None,
                completion=_int(m.group(comp)) if comp else None,
            )
    return OverflowLimits()
