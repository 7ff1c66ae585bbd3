"""Whose signed reasoning is whose: which deployment issued each signature the gateway relayed
(Claude's thinking ``signature``, OpenAI's reasoning ``encrypted_content``, Gemini's
``thoughtSignature``), and which deployments refused which others' (``policy/foreign_reasoning.py``).

A conversation that moved to a key of another organization carries the old key's reasoning,
which the new key refuses (the module above states the assumption). Without a memory, the
refusal cost a call on every later turn, and its rescue left out all of it, the answering key's
own valid reasoning too: Claude's tool loop in progress then lost its opening block, and a Codex
conversation every reasoning item of the new key. With it, a deployment that once refused
another's reasoning gets that reasoning left out before it is sent, and a rescue leaves out only
what the refusing deployment did not issue itself.

Kept per process: each replica (and each worker) learns its own, at the cost of one refused
call per pair of deployments it meets, and a signature another process relayed is unknown
here (treated as foreign by a rescue, as before the memory). Bounded: the last ``SIGNATURES``
signatures of the three APIs together (a 16-byte digest each, never the signature itself), as
many tool call ids, and ``PAIRS`` refusing pairs (a pair is of deployments, whatever the API: an
account that refuses another's thinking refuses its reasoning items alike).
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from collections.abc import Iterable, Mapping
from typing import Any

from gateway.policy.foreign_reasoning import GEMINI_SKIP

SIGNATURES = 100_000  # about 12 MB at most: a digest, a name held by reference, the order
PAIRS = 4_096  # (refusing deployment, issuer): a config's deployments, squared, well under


def mark_of(block: Mapping[str, Any]) -> str | None:
    """What binds a thinking block to its account: a thinking block's ``signature``, a redacted
    one's ``data``; None for one without (an empty signature is a chat relay's: nobody's)."""
    mark = block.get("signature") if block.get("type") == "thinking" else block.get("data")
    return mark if isinstance(mark, str) and mark else None


def sealed_of(item: Mapping[str, Any]) -> str | None:
    """What binds a Responses reasoning item to its account: its ``encrypted_content``; None for
    one without (a record OpenAI may hold under ``store: true``, or nothing)."""
    mark = item.get("encrypted_content")
    return mark if isinstance(mark, str) and mark else None


def thought_signature_of(part: Mapping[str, Any]) -> str | None:
    """What binds a Gemini part to its account: its ``thoughtSignature`` (either spelling); None
    for one without, or with Google's stand-in for history from elsewhere (nobody's)."""
    mark = part.get("thoughtSignature")
    if mark is None:
        mark = part.get("thought_signature")
    return mark if isinstance(mark, str) and mark and mark != GEMINI_SKIP else None


def sealed_in(doc: Any) -> list[str]:
    """The ``encrypted_content`` of the reasoning items in a Responses answer (its ``output``) or
    stream event (its ``item``, or its ``response``'s output), and each such item's id as
    ``item_mark`` writes it: OpenAI's refusal names the item by id, and Codex sends its items back
    without one (codex-rs ``ResponseItem::Reasoning``: ``id`` is ``skip_serializing``), so only
    the answer that issued it tells whose the named item is."""
    if not isinstance(doc, dict):
        return []
    response = doc.get("response")
    output = (response if isinstance(response, dict) else doc).get("output")
    items = [*(output if isinstance(output, list) else ()), doc.get("item")]
    marks = []
    for i in items:
        if isinstance(i, dict) and i.get("type") == "reasoning" and (mark := sealed_of(i)) is not None:
            marks.append(mark)
            if isinstance(i.get("id"), str) and i["id"]:
                marks.append(item_mark(i["id"]))
    return marks


def item_mark(item_id: str) -> str:
    """A Responses reasoning item's id, kept beside the sealed contents (never equal to one)."""
    return "item-id:" + item_id


def thought_signatures_in(parts: Any) -> list[str]:
    """The thought signatures of a Gemini answer's parts."""
    return [m for p in parts if isinstance(p, dict) and (m := thought_signature_of(p)) is not None]


# Each API's reading of what binds an element of its history (a Messages thinking block, a
# Responses reasoning item, a Gemini part) to an account.
MARKS = {"messages": mark_of, "responses": sealed_of, "gemini": thought_signature_of}


class Signers:
    __slots__ = ("_issued", "_off", "_pairs", "_refusing", "_size")

    def __init__(self, size: int = SIGNATURES) -> None:
        self._issued: OrderedDict[bytes, str] = OrderedDict()
        # The tool calls of loops the gateway asked without thinking (``loop_unthought``): their
        # later steps are asked so too, their turns having no thinking to start with.
        self._off: OrderedDict[str, None] = OrderedDict()
        self._refusing: dict[str, set[str]] = {}  # deployment -> the issuers it refused
        self._pairs = 0
        self._size = size

    def issued(self, mark: str, deployment: str) -> None:
        key = _digest(mark)
        self._issued[key] = deployment
        self._issued.move_to_end(key)
        if len(self._issued) > self._size:
            self._issued.popitem(last=False)

    def issuer(self, mark: str) -> str | None:
        return self._issued.get(_digest(mark))

    def any_asked_off(self) -> bool:
        """Whether any request went without the thinking its client asked (asked per send)."""
        return bool(self._off)

    def asked_off(self, call: str) -> bool:
        """Whether a request holding this tool call went without the thinking its client asked."""
        return call in self._off

    def went_off(self, calls: Iterable[str]) -> None:
        for call in calls:
            self._off[call] = None
            self._off.move_to_end(call)
            if len(self._off) > self._size:
                self._off.popitem(last=False)

    def refused(self, deployment: str, issuers: Iterable[str]) -> None:
        """``deployment`` refused thinking issued by these (itself excepted)."""
        known = self._refusing.setdefault(deployment, set())
        for issuer in issuers:
            if issuer != deployment and issuer not in known and self._pairs < PAIRS:
                known.add(issuer)
                self._pairs += 1

    def refuses_any(self, deployment: str) -> bool:
        """Whether ``deployment`` refused anyone's thinking before (a dict lookup: asked per send)."""
        return bool(self._refusing.get(deployment))

    def refuses(self, deployment: str, block: Mapping[str, Any]) -> bool:
        """Whether ``deployment`` refused the issuer of this thinking block before."""
        return self.refuses_mark(deployment, mark_of(block))

    def refuses_mark(self, deployment: str, mark: str | None) -> bool:
        """Whether ``deployment`` refused the issuer of this signature before."""
        issuer = self.issuer(mark) if mark is not None else None
        return issuer is not None and issuer in self._refusing.get(deployment, ())

    def foreign_to(self, deployment: str, block: Mapping[str, Any]) -> bool:
        """For a rescue after ``deployment`` refused thinking: every block it did not issue."""
        return self.foreign_mark(deployment, mark_of(block))

    def foreign_mark(self, deployment: str, mark: str | None) -> bool:
        """For a rescue: whether ``deployment`` did not issue this signature (or it has none)."""
        return mark is None or self.issuer(mark) != deployment


def _digest(mark: str) -> bytes:
    return hashlib.blake2b(mark.encode(), digest_size=16).digest()
