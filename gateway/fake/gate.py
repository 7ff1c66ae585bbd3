"""Where the fake upstream consults its keys: before it picks an answer, and on the answer.

``screen`` runs before a scripted step is taken from the queue, so a request refused for its
key leaves the script to the requests that get through (a real provider refuses before any
model runs). ``stamp`` counts the answer's tokens and puts the rate-limit headers on it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from gateway.fake import gemini
from gateway.fake.keyed import (
    NOMINAL_RPM,
    bearer,
    credential_of,
    dialect_of,
    misplaced_anthropic_credential,
    missing_key,
    missing_version,
    rate_headers,
    refusal,
    request_tokens,
)
from gateway.fake.limits import KeyLimits
from gateway.fake.steps import Reply, Step, Stream, sse_data

API_PATHS = ("/completions", "/messages", "/responses", ":generateContent", ":streamGenerateContent")
COUNTING_PATH = "/messages/count_tokens"  # limited apart from messages (KeyLimits.counting_limited)


def screen(keys: KeyLimits, path: str, headers: Mapping[str, str], payload: dict[str, Any], *,
           require_key: bool, strict_headers: bool, query: Mapping[str, str] | None = None) -> Reply | None:  # fmt: skip
    """The refusal this request gets before any answer is chosen, or None to go on."""
    dialect, key = dialect_of(path), credential_of(headers, query)
    if dialect == "google" and bearer(headers) is not None:
        # Google reads any Authorization header as an OAuth token, a valid key beside it or not.
        return gemini.bearer_refused()
    # The Gemini API has no keyless calls; a local server speaking it does not exist, so only
    # ``strict_headers`` (the real APIs' header rules) turns this off.
    if key is None and (require_key or (strict_headers and dialect == "google")):
        return missing_key(dialect)
    if strict_headers and dialect == "anthropic":
        misplaced = misplaced_anthropic_credential(headers)
        if misplaced is not None:
            return misplaced
    # Anthropic refuses a Messages call without the version header; off by default because
    # older tests post to the fake without it (see FakeUpstream.strict_headers).
    if strict_headers and dialect == "anthropic" and not headers.get("anthropic-version"):
        return missing_version()
    verdict = keys.check(key)
    if verdict is not None and verdict.reason == "revoked":
        return refusal(dialect, verdict, key, "", None)  # no rate-limit headers: no account behind it
    if path.endswith(COUNTING_PATH):
        counting = keys.check_counting(key)
        return None if counting is None else refusal(dialect, counting, key, "", None)
    if not path.endswith(API_PATHS):
        return None
    verdict = verdict or keys.admit(key, request_tokens(payload))
    if verdict is None:
        return None
    snap = keys.snapshot(key)
    if verdict.reason in ("tokens", "too_large"):
        limit = snap.tokens.capacity if snap is not None and snap.tokens is not None else None
    else:
        limit = snap.requests.capacity if snap is not None and snap.requests is not None else NOMINAL_RPM
    named = gemini.method_of(path)
    default = {"anthropic": "claude-sonnet-4-5", "google": gemini.MODEL}.get(dialect, "gpt-4o-mini")
    model = named[1] if named is not None else str(payload.get("model") or default)
    reply = refusal(dialect, verdict, key, model, limit, keys.retry_after)
    limited_s = verdict.wait_s if verdict.reason == "limited" else 0.0
    reply.headers.update(rate_headers(dialect, snap, keys.clock(), limited_s, NOMINAL_RPM))
    return reply


def stamp(keys: KeyLimits, path: str, headers: Mapping[str, str], payload: dict[str, Any], step: Step,
          query: Mapping[str, str] | None = None) -> Step:  # fmt: skip
    """``step`` with its key's rate-limit headers (the step's own headers win), its tokens counted."""
    key = credential_of(headers, query)
    if not path.endswith(API_PATHS) or keys.snapshot(key) is None or not isinstance(step, (Reply, Stream)):
        return step
    if isinstance(step, Reply):
        used, failed = answer_tokens([step.body]), step.status >= 400
    else:
        used, failed = answer_tokens(step.events), False
    # An answer without usage numbers costs what the fake estimates its input at; an error, nothing.
    keys.charge(key, used if used is not None else (0 if failed else request_tokens(payload)))
    rate = rate_headers(dialect_of(path), keys.snapshot(key), keys.clock())
    return dataclasses.replace(step, headers={**rate, **step.headers})


def answer_tokens(events: list[Any]) -> int | None:
    """Input plus output tokens of an answer (a body, or a stream's events): the input from
    the first usage that states it (Anthropic's message_start), the output from the last
    (its message_delta is cumulative); None when no usage is stated."""
    n_in: int | None = None
    n_out: int | None = None
    for ev in events:
        data = ev if isinstance(ev, dict) else sse_data(ev)
        for holder in (data, data.get("message"), data.get("response")) if isinstance(data, dict) else ():
            u = holder.get("usage") if isinstance(holder, dict) else None
            if not isinstance(u, dict):
                continue
            got_in = u.get("prompt_tokens", u.get("input_tokens"))
            got_out = u.get("completion_tokens", u.get("output_tokens"))
            n_in = got_in if n_in is None and isinstance(got_in, int) else n_in
            n_out = got_out if isinstance(got_out, int) else n_out
        google = data.get("usageMetadata") if isinstance(data, dict) else None
        if isinstance(google, dict):  # Gemini: the last chunk's counts are the answer's
            got_in = google.get("promptTokenCount")
            got_out = (google.get("candidatesTokenCount") or 0) + (google.get("thoughtsTokenCount") or 0)
            n_in = got_in if n_in is None and isinstance(got_in, int) else n_in
            n_out = got_out if isinstance(got_out, int) else n_out
    return None if n_in is None and n_out is None else (n_in or 0) + (n_out or 0)


