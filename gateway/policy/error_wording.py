"""Families of meaning in error wording, the last evidence the classifier reads.

Each family is the ways providers say one thing (see the cases in ``tests/corpus/``): not one
phrase per provider, but the words a provider reaches for when it means "this request is too
long", "your money ran out", "we are full". Codes, numbers, headers and the request itself are
read first (``classify.py``); wording decides only what they leave open.
"""

from __future__ import annotations

import re

_I = re.IGNORECASE

# The request does not fit the model's window.
OVERFLOW = re.compile(
    r"maximum context length"  # OpenAI, Azure, vLLM, DeepSeek, OpenRouter, Fireworks, SGLang
    r"|context[ _]length[ _]exceeded"
    r"|prompt is too long"  # Anthropic (also via Bedrock / Vertex / OpenRouter), Fireworks
    r"|input is too long"  # Bedrock ValidationException
    r"|exceeds? (?:the )?(?:available |maximum )?context (?:size|length|window|limit)"  # llama.cpp, OpenAI
    r"|input exceeds the context window"  # OpenAI Responses
    r"|exceeds the maximum number of tokens allowed"  # Gemini
    r"|longer than the maximum model length"  # vLLM (newer)
    r"|too long to fit into the model"  # vLLM
    r"|maximum (?:prompt|input) length"  # xAI, vLLM
    r"|maximum allowed input length"
    r"|tokens \+ `?max_new_tokens`? must be <="  # TGI / HF endpoints
    r"|`?inputs`? must have less than \d+ tokens"  # TGI ValidationError::InputLength (validation.rs)
    r"|input token count is \d+ but model only supports up to"  # Vertex AI
    r"|length of prompt_tokens \(\d+\) must be less than max_seq_len"  # SiliconFlow
    # Cohere (docs.cohere.com/v1/reference/errors); not its "max tokens must be less than or equal
    # to 4096, the maximum output": that limit is on the output, which compression cannot help.
    # The second also ends its RAG wording "too many tokens: minimal context could not be added to
    # prompt (size limit exceeded by 280 tokens)": the documents and turns over the window together.
    r"|total number of tokens in the prompt cannot exceed|size limit exceeded by \d+ tokens"
    r"|too large for model with \d+ maximum context"  # Mistral
    r"|context window (?:of this model|exceeded|is exceeded|limit)"
    r"|reduce the length of the messages"  # Groq's code-less variant
    r"|the model is loaded with context length of only"  # LM Studio
    r"|does not currently support mid-generation context overflow"  # LM Studio
    r"|greater than the context length"  # LM Studio
    r"|exceeded (?:max )?context length"  # Ollama
    r"|exceeded model token limit"  # Kimi
    r"|context window exceeds limit"  # MiniMax
    r"|range of input length should be"  # DashScope / Qwen
    r"|configured context size is"
    r"|token count of \d+ exceeds the limit"  # GitHub Copilot
    r"|longer than the (?:model'?s )?context length"  # Together, SGLang, Ollama
    r"|number of tokens \(prompt and prediction\) cannot exceed"  # Cohere
    r"|prompt exceeds max length"  # Zhipu / Z.ai code 1261
    r"|longer than the specified maximum sequence length"  # IBM watsonx
    r"|too many tokens in batch"  # Mistral embeddings
    r"|tokens exceed n_ctx"  # llama-box (GPUStack)
    r"|context size has been exceeded"  # llama.cpp (as a 500), LM Studio MLX
    # llama-server: an embedding or rerank input longer than the physical batch, as a 500
    # (tools/server/server-context.cpp:3165-3168 of the llama.cpp vendored in llama-cpp-python 0.3.36).
    r"|too large to process\W+(?:please )?increase the physical batch size"
    # llama-cpp-python's multimodal chat handlers, as a 500 (llama_cpp/llama_chat_format.py:2992,
    # 3007 in 0.3.36; the server's catch-all answers any other exception so: server/errors.py:155).
    r"|prompt exceeds n_ctx"
    r"|maximum supported sequence length is"  # SambaNova Cloud
    r"|request body too large for .{0,80}? max size: \d+ tokens"  # GitHub Models
    r"|too many input tokens"  # not bare "too many tokens": Bedrock throttling says that
    # Worded without "context": the prompt the server must keep is over its window (LM Studio's
    # n_keep >= n_ctx).
    r"|cannot truncate (?:the )?prompt|n_keep \(\d+\) >= n_ctx",
    _I,
)
# The window named is about the context, so a byte-limit status or code is an overflow after all.
CONTEXT_WORDS = re.compile(r"context (?:window|length|size)", _I)
# One request bigger than the whole per-minute window, said in words (OpenAI, Groq).
WINDOW_OVERFLOW = re.compile(r"request too large for .{0,200}? tokens per min", _I)
# Azure OpenAI's tokens-per-minute limit, a deployment's own: "Requests to the
# ChatCompletions_Create Operation ... have exceeded token rate limit of your current OpenAI S0
# pricing tier" and, newer, "Your requests to gpt-4.1-nano ... have exceeded the token rate
# limit for your current AIServices S0 pricing tier" (tests/corpus; icereed/paperless-gpt#814).
# The TPM a deployment is assigned "becomes the deployment's tokens-per-minute limit", and a
# request counts its prompt and max_tokens against it (learn.microsoft.com/en-us/azure/
# ai-services/openai/how-to/quota): a per-minute window, whatever wait the body names.
TOKEN_RATE_LIMIT = re.compile(r"exceeded (?:the )?token rate limit", _I)
# A limit on request bytes: no compression of messages is what the provider asked for.
BYTES = re.compile(
    r"maximum allowed number of bytes|request entity too large|payload too large|string too long"
    r"|exceeds the maximum size|received message larger than max",
    _I,
)
# An empty account, said outright: outranks a throttle type and counts even on a 5xx.
BALANCE = re.compile(
    r"insufficient (?:balance|credits|funds)|credit balance is too low|余额不足|run out of credits"
    r"|balance is insufficient"  # SiliconFlow 30001 / 30011
    r"|out of extra usage|good standing|overdue|arrear",
    _I,
)
# A spending cap someone set on a key, team or deployment (OpenRouter's key limit, LiteLLM's
# budgets): money, or a higher cap, is the remedy, whatever the status and type say.
SPEND_CAP = re.compile(
    r"key limit exceeded|budget has been exceeded|(?:exceeded|crossed|over) (?:the |your )?budget", _I
)
# A model gated behind a plan: a subscription is the remedy, though the provider answers 403.
PLAN_GATE = re.compile(
    r"requires? (?:a |an )?(?:paid |pro |active )?subscription|subscription (?:is )?required"
    r"|upgrade for access",
    _I,
)
# Money, a plan or a paid allowance is the remedy.
BUDGET = re.compile(
    r"exceeded your current quota"  # OpenAI insufficient_quota; Gemini reuses it per minute too
    r"|credit balance|insufficient (?:credits|balance|funds|quota)|out of credits|no credits|any credits"
    r"|(?:more|available) credits|purchase credits|spending limit|spend limit|billing details"
    r"|payment required|plans & billing|余额不足|no resource package|recharge"
    r"|extra usage|usage limit|free (?:allocated )?quota|free allocation|free[ -]models?[ -]per|free tier"
    r"|monthly (?:included )?credits|top up|upgrade (?:to|your plan)|subscribe to",
    _I,
)
# The provider is full or failing: waiting helps, and the breaker should hear of it.
CAPACITY = re.compile(
    r"overloaded|at capacity|capacity (?:exceeded|exhausted)|no capacity|out of capacity"
    r"|no more data centers|too busy|server is busy|model busy|temporarily unavailable"
    r"|queue (?:size|is full)|maximum queue|high demand",
    _I,
)
# A 5xx body that blames the request: pydantic / FastAPI request validation (llama-cpp-python,
# SGLang), nlohmann JSON errors while reading the request (llama.cpp, llamafile), llama-server's
# message checks, Jinja's role-order check. Response-side validation is the server failing.
REQUEST_INVALID = re.compile(
    r"validation errors? for \w*Request"
    r"|'loc': \(\s*'body'|\"loc\": ?\[\s*\"body\""
    r"|json\.exception\.(?:type_error|parse_error)"
    r"|expected '?content'? to be a string"
    r"|tools param requires --jinja"
    r"|response_format type must be"
    r"|failed to parse tool call arguments"
    r"|unsupported param"
    r"|conversation roles must alternate",
    _I,
)
# An organization to verify before the model serves it (OpenAI: "Your organization must be
# verified to stream this model", tests/corpus/wild.json).
_UNVERIFIED = r"must be verified|verify organization"
UNVERIFIED = re.compile(_UNVERIFIED, re.IGNORECASE)
# Only different credentials, a verified account or an allowed place helps.
AUTH = re.compile(
    r"api key not valid|invalid api key|incorrect api key|invalid x-api-key"
    rf"|{_UNVERIFIED}"
    r"|has been suspended|caller does not have permission|permission denied"
    # A credential of a kind this use does not take (a subscription's OAuth token on the API).
    r"|credential is only authorized for",
    _I,
)
# The caller's place is not served: only calling from elsewhere helps, whatever the status (Bedrock
# says it in a 400 ValidationException, a model proxy with 451).
REGION = re.compile(
    r"location is not supported|region,? or territory not supported|unsupported countr(?:y|ies)"
    r"|not (?:available|supported|allowed) (?:in|from) your (?:country|region|location)",
    _I,
)
# A refusal of this request's content: no other key or upstream takes it either, nor money.
MODERATION = re.compile(r"content violates|input was flagged|requires moderation", _I)
# The caller is over its own rate: waiting helps.
THROTTLE = re.compile(r"rate[ -]?limit|too many (?:requests|tokens)|concurrency|throttl", _I)
# The body talks about a limit at all: the reset horizon applies only then.
LIMIT = re.compile(r"\blimit|quota|too many|exceeded|allowance|allocation|使用上限|限额", _I)
