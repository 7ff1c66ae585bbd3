"""Reasoning the upstream refuses as not its own, left out: before the send where the gateway
knows it will be refused, else once, after the refusal.

A conversation that moved between accounts (a pool's keys, a fallback, a translated
deployment and back) carries reasoning signed elsewhere, which the provider refuses
(``policy/foreign_reasoning.py``). The request is sent once more without it, to the same
upstream: the client's conversation goes on instead of failing on every turn until it starts
a new one. The client is told with ``x-llm-reasoning-dropped`` and the log line's
``reasoning_dropped`` (what was left out, never its content).

The gateway remembers whose signed reasoning is whose (``policy/thinking_signers.py``): a
rescue leaves out only what the refusing deployment did not issue (Claude's thinking blocks,
OpenAI's reasoning items; Gemini's signatures become Google's stand-in), and a deployment that
refused another's reasoning gets it left out up front on later turns, so a move costs one call
once, not one on every turn, and the new deployment's own reasoning stays. Unsigned thinking (a
chat relay's, which has nothing to sign with) never goes to a Messages upstream. And a tool loop
the gateway asked without thinking (its turn has no thinking to start with) goes on without
thinking until it ends, as Anthropic requires (``loop_unthought``); one Anthropic refused for
that goes on so after its one refused call.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any

from gateway import jsonbody
from gateway.pipeline.attempt import Call
from gateway.pipeline.outcome import Failure, Outcome, RequestState
from gateway.pipeline.send import InPool, Onward, resend
from gateway.policy.foreign_reasoning import (
    GATEWAY_THINKING_MARK,
    THOUGHT,
    gemini_without_gateway_thinking,
    loop_calls,
    loop_unthought,
    refused_reasoning,
    refused_unthought,
    strip,
    thinking_left_out,
    thinks,
)
from gateway.policy.retry import RetryPlan
from gateway.policy.thinking_signers import MARKS, item_mark, mark_of
from gateway.services import Services

# What each API's signed reasoning is called, for the header and the log.
DROPPED = {"messages": "thinking", "responses": "reasoning", "gemini": "thought_signature"}
SEALED = ("responses", "gemini")  # the APIs ``sealed_shaped`` reads
_GATEWAY_THINKING = GATEWAY_THINKING_MARK.encode()
# A thinking block with an empty signature, as a chat relay's reasoning comes back from a client
# (``translate/messages_chat``): Anthropic refuses it ("Invalid `signature` in `thinking` block").
# Looked for as JSON.stringify (Claude Code) and Python's json (the SDKs) write it: a byte search
# costs a fraction of a regular expression's over a long request.
_UNSIGNED = (b'"signature":""', b'"signature": ""')
# Where a refusal points: "messages.2.content.0: Invalid `signature` in `thinking` block".
_AT = re.compile(r"messages\.(\d+)\.content\.(\d+)")
# The reasoning item OpenAI names: "The encrypted content for item rs_… could not be verified.",
# "Item with id 'rs_…' not found."
_ITEM = re.compile(r"\bitem\s+(?:with\s+id\s+')?(rs_[\w-]+)", re.IGNORECASE)
# A rescue's fix, for the deployment a request goes to: (its name, the request as it sends it)
# -> that request without what it would refuse; None when it carries none of it.
Fix = Callable[[str, dict[str, Any]], "dict[str, Any] | None"]


def shaped(
    svc: Services, state: RequestState, deployment: str, payload: dict[str, Any], body: bytes | None
) -> dict[str, Any]:
    """A Messages request as it goes to ``deployment``: without the thinking it refused from
    another deployment before and without unsigned thinking (``body``: the request's bytes, to
    look for that; None when it has none, as a translation writes none), and asked without
    thinking while the tool loop in progress began without it. ``payload`` itself when none of
    this applies (two dict lookups and the last two messages read, mostly)."""
    signers = svc.signers
    out = payload
    refuses = signers.refuses_any(deployment)
    if refuses or (body is not None and _unsigned_in(body)):

        def foreign(block: Mapping[str, Any]) -> bool:
            return mark_of(block) is None or (refuses and signers.refuses(deployment, block))

        out = thinking_left_out(payload, foreign=foreign) or payload
    if signers.any_asked_off():  # the rule is for loops this process asked without thinking
        out = loop_unthought(out, signers.asked_off) or out
    if out is not payload:
        _note(svc, state, payload, out)
    return out


def sealed_shaped(
    svc: Services, state: RequestState, api: str, deployment: str, payload: dict[str, Any]
) -> dict[str, Any]:
    """A Responses or Gemini request as it goes to ``deployment``: without the reasoning items
    (Gemini: with Google's stand-in for the signatures) of the deployments it refused before.
    ``payload`` itself when it refused none (one dict lookup: asked per send)."""
    signers = svc.signers
    if not signers.refuses_any(deployment):
        return payload
    mark = MARKS[api]
    out = strip(api, payload, foreign=lambda x: signers.refuses_mark(deployment, mark(x)))
    if out is None:
        return payload
    _label(state, DROPPED[api])
    return out


def gemini_passed(body: bytes, payload: dict[str, Any]) -> dict[str, Any]:
    """A Gemini request as it goes to a Gemini upstream as it is (no translation): Claude's
    thinking, which the gateway sealed into a ``thoughtSignature`` for a Messages route
    (``translate/sealed_thinking.py``), with Google's stand-in instead, as for any signature
    Google did not issue (it refuses them: "Corrupted thought signature."). ``body``: the
    client's bytes, searched first: every other request is spared a walk of its parts, and a
    translated leg is not asked at all (it unseals the value or drops it)."""
    if body.find(_GATEWAY_THINKING) < 0:  # find(), not `in`: see gateway/sse.py
        return payload
    return gemini_without_gateway_thinking(payload) or payload


def gemini_count_body(body: bytes, doc: dict[str, Any]) -> bytes:
    """A countTokens body (``doc``, parsed) as Google is sent it: ``gemini_passed`` for its
    ``contents`` and those of a whole ``generateContentRequest``; ``body`` itself when it
    carries none of the gateway's seals."""
    if body.find(_GATEWAY_THINKING) < 0:
        return body
    out = gemini_without_gateway_thinking(doc)
    for key in ("generateContentRequest", "generate_content_request"):
        inner = doc.get(key)
        swapped = gemini_without_gateway_thinking(inner) if isinstance(inner, dict) else None
        if swapped is not None:
            out = {**(out or doc), key: swapped}
    return body if out is None else jsonbody.dumps(out, lenient=isinstance(doc, jsonbody.Lenient))


def _label(state: RequestState, label: str) -> None:
    labels = (state.reasoning_dropped or "").split(",")
    state.reasoning_dropped = ",".join(dict.fromkeys(x for x in [*labels, label] if x))


def _unsigned_in(body: bytes) -> bool:
    # find(), not `in`: on every Messages request, where bytes `in` costs a TypeError made and
    # dropped first (tests/unit/test_hot_path_costs.py); most bodies have no signature at all.
    return body.find(b'"signature"') >= 0 and any(body.find(mark) >= 0 for mark in _UNSIGNED)


def _note(svc: Services, state: RequestState, before: dict[str, Any], after: dict[str, Any]) -> None:
    """What was left out, told to the client; a loop asked without thinking, remembered."""
    labels = (state.reasoning_dropped or "").split(",")
    if before.get("messages") is not after.get("messages"):
        labels.append("thinking")
    if thinks(before) and not thinks(after):
        labels.append("thinking_off")
        messages = after.get("messages")
        svc.signers.went_off(loop_calls(messages) if isinstance(messages, list) else ())
    state.reasoning_dropped = ",".join(dict.fromkeys(label for label in labels if label)) or None


async def rescue(
    svc: Services, state: RequestState, plan: RetryPlan, call: Call, refused: Failure,
    onward: Onward | None = None, in_pool: InPool | None = None,
) -> Outcome:
    """One resend without the reasoning refused; on a pool's deployment (``in_pool``), one that
    deployment refuses as it would move a request on goes to a sibling, fixed for that sibling."""
    if state.reasoning_rescued:
        return refused
    upstream_body = refused.foreign.upstream_body if refused.foreign is not None else refused.body
    message = refused.classification.message
    if not refused_reasoning(message, upstream_body):
        return refused
    try:
        doc, lenient = jsonbody.loads(call.body)
    except ValueError:
        return refused
    api = call.dialect.api
    if not isinstance(doc, dict):
        return refused
    fix: Fix
    if api == "messages" and refused_unthought(message):
        fix = _unthought  # the loop's turn came without thinking: none is asked
    elif api == "messages":
        fix = _without_foreign(svc, call.up.cfg.name, doc, message)
    else:
        fix = _without_sealed(svc, api, call.up.cfg.name, doc, message)
    fixed = fix(call.up.cfg.name, doc)
    if fixed is None:
        return refused  # nothing of the kind was sent: the refusal stands
    capped = state.output_capped
    if capped is not None:
        # A budget lowered by an earlier rescue was sent in another body: lower this one too.
        fixed = call.dialect.lower_output(fixed, capped["to"]) or fixed
    if api == "messages":
        _note(svc, state, doc, fixed)
    else:
        _label(state, DROPPED[api])
    state.reasoning_rescued = True
    svc.tracing.next_attempt(state, "reasoning_retry")

    def fixed_for(base: Call) -> Call | Failure:
        """A sibling's call fixed by the same rule for that sibling: what it did not issue left
        out (nothing is learnt of it: it refused nothing)."""
        try:
            other, other_lenient = jsonbody.loads(base.body)
        except ValueError:
            return base
        out = fix(base.up.cfg.name, other) if isinstance(other, dict) else None
        if out is None:
            return base
        if capped is not None:
            out = base.dialect.lower_output(out, capped["to"]) or out
        return replace(base, body=jsonbody.dumps(out, lenient=other_lenient))

    body = jsonbody.dumps(fixed, lenient=lenient)
    return await resend(svc, state, plan, call, body, onward, in_pool, fixed_for)


def _unthought(_deployment: str, doc: dict[str, Any]) -> dict[str, Any] | None:
    return loop_unthought(doc)


def _without_foreign(svc: Services, deployment: str, doc: dict[str, Any], message: str | None) -> Fix:
    """How a Messages request ``deployment`` refused the thinking of goes out (``Fix``, for it or
    a sibling it moves to): without every block it did not
    issue itself (all of them when the gateway knows none as its own), and what it refused
    learnt: later turns leave that out before they are sent (``shaped``). A refusal of a block it
    did issue is about something else (a block bound to a prefix that changed, one modified):
    every block goes, as before the gateway knew whose they were."""
    signers = svc.signers
    refused = _pointed_at(doc, message)
    if refused is not None and not signers.foreign_to(deployment, refused):
        return lambda _to, d: strip("messages", d)
    issuers = {
        issuer
        for m in doc.get("messages") or () if isinstance(m, dict) and m.get("role") == "assistant"
        for b in m.get("content") or () if isinstance(m.get("content"), list)
        and isinstance(b, dict) and b.get("type") in THOUGHT
        and (mark := mark_of(b)) is not None and (issuer := signers.issuer(mark)) is not None
    }  # fmt: skip
    signers.refused(deployment, issuers)
    return lambda to, d: strip("messages", d, foreign=lambda b: signers.foreign_to(to, b))


def _pointed_at(doc: dict[str, Any], message: str | None) -> dict[str, Any] | None:
    """The thinking block a refusal names by its place, if it names one."""
    at = _AT.search(message or "")
    messages = doc.get("messages")
    if at is None or not isinstance(messages, list):
        return None
    i, j = int(at[1]), int(at[2])
    content = messages[i].get("content") if i < len(messages) and isinstance(messages[i], dict) else None
    block = content[j] if isinstance(content, list) and j < len(content) else None
    return block if isinstance(block, dict) and block.get("type") in THOUGHT else None


def _without_sealed(
    svc: Services, api: str, deployment: str, doc: dict[str, Any], message: str | None
) -> Fix:
    """How a Responses or Gemini request ``deployment`` refused the reasoning of goes out
    (``Fix``, for it or a sibling it moves to): without what it did
    not issue itself (all of it when the gateway knows none as its own), and what it refused
    learnt, as ``_without_foreign`` does for Messages: the issuer of the item the refusal names
    (OpenAI names one), else of every one sent (Gemini names none). When the named item is one
    the deployment issued, or the gateway knows every one as its own, the refusal is about
    something else: all of it goes, as before the gateway knew whose it was."""
    signers = svc.signers
    mark = MARKS[api]
    signed = _signed_elements(api, doc)
    named = _ITEM.search(message or "") if api == "responses" else None
    pointed = next((x for x in signed if named is not None and x.get("id") == named[1]), None)
    def every(_to: str, d: dict[str, Any]) -> dict[str, Any] | None:
        return strip(api, d)

    if pointed is not None and not signers.foreign_mark(deployment, mark(pointed)):
        return every
    if named is not None and pointed is None:
        # Named by an id the request does not carry (Codex sends none): whose it is, as the
        # answer that issued it said; unknown, nothing is learnt (blaming every issuer sent
        # took a same-organization sibling's reasoning off every later turn: review).
        named_by = signers.issuer(item_mark(named[1]))
        if named_by == deployment:
            return every
        issuers = {named_by} if named_by is not None else set()
    else:
        blamed = [pointed] if pointed is not None else signed  # (a record not kept names no issuer)
        issuers = {i for x in blamed if (m := mark(x)) is not None and (i := signers.issuer(m)) is not None}
    signers.refused(deployment, issuers)
    return lambda to, d: strip(api, d, foreign=lambda x: signers.foreign_mark(to, mark(x))) or strip(api, d)


def _signed_elements(api: str, doc: dict[str, Any]) -> list[dict[str, Any]]:
    """The reasoning items of a Responses request, the parts of a Gemini one's turns."""
    if api == "responses":
        items = doc.get("input")
        return [i for i in items or () if isinstance(i, dict) and i.get("type") == "reasoning"]
    out: list[dict[str, Any]] = []
    for c in doc.get("contents") or ():
        parts = c.get("parts") if isinstance(c, dict) else None
        out += [p for p in parts if isinstance(p, dict)] if isinstance(parts, list) else []
    return out
