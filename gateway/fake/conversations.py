"""OpenAI's Conversations API as the fake upstream answers it: a conversation made, read,
updated and deleted, and its items added, listed, read and deleted, each visible to the
project of the key that made it. Pure: the caller gives the request's method, path, query,
body and project, and plays the Reply.

The shapes are the API reference's (https://platform.openai.com/docs/api-reference/conversations;
the same methods in openai-python 3.x's ``client.conversations`` and ``.items``):

* ``POST /v1/conversations`` {items?, metadata?} -> {id, object: "conversation", created_at, metadata};
* ``GET`` / ``POST`` (metadata) / ``DELETE /v1/conversations/{id}``, the delete answered
  {id, object: "conversation.deleted", deleted: true};
* ``POST /v1/conversations/{id}/items`` {items} (at most 20 a call) -> a list of the items added;
* ``GET /v1/conversations/{id}/items?after&limit&order`` -> {object: "list", data, first_id,
  last_id, has_more}, ``order`` ``desc`` unless asked, ``limit`` 20 unless asked (1 to 100);
* ``GET`` / ``DELETE /v1/conversations/{id}/items/{item_id}``, the delete answered with the
  conversation.

The OpenAI Agents SDK's ``OpenAIConversationsSession`` makes one with ``items: []``, adds each
turn's items and lists them (``order: asc``; ``desc`` with a limit) before the next turn.
A stored item is an output item: an easy input message (``{"role", "content": "..."}``) is
kept as a ``message`` with an id, ``status`` and typed content parts, as the API lists it.
The wording of a refusal (an unknown id, a bad ``order``) is the fake's own, in OpenAI's
envelope; an id of another project's conversation is as unknown as one never made.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from gateway.fake.messages import anthropic_error
from gateway.fake.responses import responses_error
from gateway.fake.steps import Reply, response_in

ROOT = "/v1/conversations"
MAX_ADDED = 20  # "You may add up to 20 items at a time" (the items-create reference)
_PREFIX = {"message": "msg", "function_call": "fc", "function_call_output": "fco", "reasoning": "rs"}


@dataclass
class Conversation:
    project: str | None
    created_at: int
    metadata: dict[str, Any]
    items: list[dict[str, Any]] = field(default_factory=list)


class Conversations:
    """The conversations the fake holds, by id."""

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self.held: dict[str, Conversation] = {}
        self._clock = clock
        self._made = 0

    def answer(self, method: str, path: str, query: Mapping[str, str], payload: dict[str, Any],
               project: str | None) -> Reply:  # fmt: skip
        """The API's answer to ``method`` on ``path`` (a path at or under ``ROOT``)."""
        parts = path[len(ROOT) :].strip("/").split("/") if path != ROOT else []
        if not parts:
            return self._create(payload, project) if method == "POST" else _no_route(method, path)
        cid, rest = parts[0], parts[1:]
        held = self.held.get(cid)
        if held is None or held.project != project:
            return _unknown("Conversation", cid)
        if not rest:
            return self._one(method, path, cid, held, payload)
        if rest[0] != "items" or len(rest) > 2:
            return _no_route(method, path)
        if len(rest) == 1:
            if method == "POST":
                return self._add(held, payload)
            return _listed(held, query) if method == "GET" else _no_route(method, path)
        return self._item(method, path, cid, held, rest[1])

    def append(self, cid: Any, items: list[Any]) -> None:
        """Items a Responses turn run in conversation ``cid`` added (its input and output), as
        the API adds them; an id the fake does not hold adds nothing."""
        held = self.held.get(cid) if isinstance(cid, str) else None
        if held is not None:
            held.items += [_stored(i) for i in items if isinstance(i, dict)]

    def _create(self, payload: dict[str, Any], project: str | None) -> Reply:
        items = payload.get("items")
        if isinstance(items, list) and len(items) > MAX_ADDED:
            return _too_many(len(items))
        self._made += 1
        cid = f"conv_fake{self._made:06d}"
        metadata = payload.get("metadata")
        held = Conversation(project, int(self._clock()), metadata if isinstance(metadata, dict) else {})
        self.held[cid] = held
        self.append(cid, items if isinstance(items, list) else [])
        return Reply(200, _shown(cid, held))

    def _one(self, method: str, path: str, cid: str, held: Conversation, payload: dict[str, Any]) -> Reply:
        if method == "GET":
            return Reply(200, _shown(cid, held))
        if method == "POST":
            metadata = payload.get("metadata")
            held.metadata = metadata if isinstance(metadata, dict) else held.metadata
            return Reply(200, _shown(cid, held))
        if method == "DELETE":
            del self.held[cid]
            return Reply(200, {"id": cid, "object": "conversation.deleted", "deleted": True})
        return _no_route(method, path)

    def _add(self, held: Conversation, payload: dict[str, Any]) -> Reply:
        items = payload.get("items")
        if not isinstance(items, list):
            return responses_error(400, "Missing required parameter: 'items'.", "invalid_request_error",
                                   "missing_required_parameter", "items")  # fmt: skip
        if len(items) > MAX_ADDED:
            return _too_many(len(items))
        added = [_stored(i) for i in items if isinstance(i, dict)]
        held.items += added
        return Reply(200, _page(added, has_more=False))

    def _item(self, method: str, path: str, cid: str, held: Conversation, item_id: str) -> Reply:
        at = next((n for n, i in enumerate(held.items) if i.get("id") == item_id), None)
        if at is None:
            return _unknown("Item", item_id)
        if method == "GET":
            return Reply(200, held.items[at])
        if method == "DELETE":
            del held.items[at]
            return Reply(200, _shown(cid, held))
        return _no_route(method, path)


def turn_items(payload: dict[str, Any], step: object) -> list[Any]:
    """What a Responses turn adds to the conversation it names: its input (a string is one user
    message) and the output of its answer (a body, or a stream's ``response.completed``)."""
    given = payload.get("input")
    items: list[Any] = [{"role": "user", "content": given}] if isinstance(given, str) else list(given or ())
    answer = response_in(step, "response.completed")
    output = answer.get("output") if isinstance(answer, dict) else None
    return items + (output if isinstance(output, list) else [])


def elsewhere(path: str, headers: Mapping[str, str]) -> Reply | None:
    """The answer of a provider that has no Conversations API, for a conversations path the
    gateway sent to one (a Messages or Gemini upstream); None for OpenAI's.

    * Anthropic (a request with its ``anthropic-version`` or ``x-api-key`` header): its 404
      ``not_found_error`` (https://docs.claude.com/en/api/errors), "Not Found" as its answer to
      a path it does not serve is quoted;
    * Google (``/v1beta/...``, ``/v1alpha/...``): its front end's HTML "Error 404 (Not Found)"
      page, which names the URL, as it answers any path the Gemini API does not have.
    """
    if path.startswith(("/v1beta/", "/v1alpha/")):
        page = ("<!DOCTYPE html>\n<html lang=en>\n<title>Error 404 (Not Found)!!1</title>\n"
                f"<p><b>404.</b> <ins>That\u2019s an error.</ins>\n<p>The requested URL <code>{path}</code> "
                "was not found on this server.  <ins>That\u2019s all we know.</ins>\n")  # fmt: skip
        return Reply(404, page, headers={"Content-Type": "text/html; charset=UTF-8"})
    if "anthropic-version" in headers or "x-api-key" in headers:
        return anthropic_error(404, "not_found_error", "Not Found")
    return None


def _listed(held: Conversation, query: Mapping[str, str]) -> Reply:
    order = query.get("order", "desc")
    if order not in ("asc", "desc"):
        return responses_error(400, f"Invalid value for 'order': {order!r}; expected 'asc' or 'desc'.",
                               "invalid_request_error", "invalid_value", "order")  # fmt: skip
    try:
        limit = int(query.get("limit", "20"))
    except ValueError:
        limit = 0
    if not 1 <= limit <= 100:
        return responses_error(400, "Invalid value for 'limit': expected an integer from 1 to 100.",
                               "invalid_request_error", "invalid_value", "limit")  # fmt: skip
    items = held.items if order == "asc" else held.items[::-1]
    after = query.get("after")
    if after:
        at = next((n for n, i in enumerate(items) if i.get("id") == after), None)
        items = items[at + 1 :] if at is not None else []
    return Reply(200, _page(items[:limit], has_more=len(items) > limit))


def _stored(item: dict[str, Any]) -> dict[str, Any]:
    """An input item as the API keeps and lists it: typed, with an id and a status."""
    kind = item.get("type") or "message"
    out = {**item, "type": kind}
    out.setdefault("id", f"{_PREFIX.get(kind, 'item')}_{uuid.uuid4().hex[:24]}")
    if kind == "message":
        content = out.get("content")
        if isinstance(content, str):
            part = "output_text" if out.get("role") == "assistant" else "input_text"
            out["content"] = [{"type": part, "text": content, **({"annotations": []} if part == "output_text" else {})}]
        out.setdefault("status", "completed")
    return out


def _shown(cid: str, held: Conversation) -> dict[str, Any]:
    return {"id": cid, "object": "conversation", "created_at": held.created_at, "metadata": held.metadata}


def _page(items: list[dict[str, Any]], has_more: bool) -> dict[str, Any]:
    return {"object": "list", "data": items, "first_id": items[0]["id"] if items else None,
            "last_id": items[-1]["id"] if items else None, "has_more": has_more}  # fmt: skip


def _unknown(what: str, oid: str) -> Reply:
    return responses_error(404, f"{what} with id '{oid}' not found.", "invalid_request_error", None)


def _too_many(count: int) -> Reply:
    return responses_error(400, f"Invalid 'items': array too long. Expected an array with maximum length "
                                f"{MAX_ADDED}, but got an array with length {count} instead.",
                           "invalid_request_error", "array_above_max_length", "items")  # fmt: skip


def _no_route(method: str, path: str) -> Reply:
    return responses_error(404, f"Invalid URL ({method} {path})", "invalid_request_error", None)
