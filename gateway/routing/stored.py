"""What a provider stores for the key that made it, and which requests name it again: a pool
must send those to the deployment whose key made it, because no other key can read it.

OpenAI keeps each Responses answer (unless asked ``store: false``) and each Conversations API
conversation for the project of the key that made it. A chained turn sent with another
project's key is refused, 400 ``previous_response_not_found``: "Previous response with id
'<id>' not found." (relayed whole in https://github.com/maximhq/bifrost/issues/2441; the fake
refuses it in gateway/fake/responses_rules.py). LiteLLM met the same in its router and sends such
a request "to the same deployment that generated the original response"
(https://github.com/BerriAI/litellm/pull/10193).

A request names a stored object by

* ``previous_response_id`` (a Responses turn chained to the last), or ``conversation`` (an id,
  or ``{"id": ...}``), in the body of ``POST /v1/responses`` and of the paths under it that
  take one (``/v1/responses/input_tokens``);
* its path: ``/v1/responses/{id}`` and what is under it (``input_items``, ``cancel``; GET,
  DELETE), ``/v1/conversations/{id}`` and its ``items``.

An answer stores an object under its top-level ``id``: a Responses answer (a body whose
``object`` is ``response``, or a stream's ``response.created``) and the answer to ``POST
/v1/conversations`` (``object`` ``conversation``).

OpenAI keeps a stored response 30 days: "Response objects are saved for 30 days by default"
(OpenAI's conversation-state guide, quoted in
https://community.openai.com/t/data-retention-for-model-response-need-clarification/1355501;
"The expiration time for a "store": true (the default) is 30 days",
https://community.openai.com/t/expiration-and-deletion-behavior-of-api-responses/1149127).
Conversations have no such limit ("Conversation objects and items in them are not subject to
the 30 day TTL", the same guide); the gateway remembers them as long, and one older than that
goes where a conversation goes without it (its affinity home).

A chained turn whose previous response no deployment is known to have made (made before the
gateway ran or by a direct call, forgotten, or written while Redis lost it) is asked of the
pool's deployments in turn: another project's key answers that 400 at once, before any event of
a stream (``not_found_here``), and the first key that answers is the one that holds it.

Keys are ``st:`` and 24 hex digits of a SHA-256 of the id: bounded whatever a client sends.
Pure: no I/O; a malformed body or path yields None, never an exception.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from typing import Any

import orjson

# How long OpenAI keeps a stored response (above): what remembering its deployment is worth.
STORED_TTL_S = 30 * 24 * 3600.0

# Segments under /v1/responses that are no response id: POST /v1/responses/input_tokens (counts
# a request's tokens) and POST /v1/responses/compact (Codex's compaction).
_NOT_IDS = frozenset({"input_tokens", "compact"})
# A stored object's id as the API writes them (resp_…, conv_…); anything else names nothing.
_ID = re.compile(r"^[A-Za-z0-9_.:=+-]{1,256}$")
# A body's leading ``"id": "..."`` member, as OpenAI writes its objects (the id first): read
# without parsing an answer of megabytes.
_LEADING_ID = re.compile(rb'^\s*\{\s*"id"\s*:\s*"([A-Za-z0-9_.:=+-]{1,256})"')
_STORED_OBJECTS = (b'"object":"response"', b'"object": "response"', b'"object":"conversation"',
                   b'"object": "conversation"')  # fmt: skip


# OpenAI's code for a ``previous_response_id`` the request's key cannot read (the sources above);
# its param is ``previous_response_id``. A ``conversation`` of another project has no refusal
# seen in public to go by: such a turn is not asked of the siblings.
_NOT_FOUND = "previous_response_not_found"


def not_found_here(status: int, provider_code: str | None) -> bool:
    """Whether an answer says that the key it was sent with holds no stored response of the id
    the turn is chained to: another project's may."""
    return status == 400 and provider_code == _NOT_FOUND


def key(object_id: str) -> str:
    """The store's key for a stored object's id."""
    return "st:" + hashlib.sha256(object_id.encode("utf-8", "surrogatepass")).hexdigest()[:24]


def _an_id(value: Any) -> str | None:
    return value if isinstance(value, str) and _ID.match(value) else None


def continued(payload: Any) -> str | None:
    """The stored object a Responses request continues: its ``previous_response_id``, else
    its ``conversation``; None when it continues none."""
    if not isinstance(payload, Mapping):
        return None
    previous = _an_id(payload.get("previous_response_id"))
    if previous is not None:
        return previous
    conversation = payload.get("conversation")
    if isinstance(conversation, Mapping):
        conversation = conversation.get("id")
    return _an_id(conversation)


def named_in_path(path: str) -> str | None:
    """The stored object a ``/v1/...`` path names, else None."""
    for root in ("/v1/responses/", "/v1/conversations/"):
        if path.startswith(root):
            segment = path[len(root) :].split("/", 1)[0]
            if root == "/v1/responses/" and segment in _NOT_IDS:
                return None
            return _an_id(segment)
    return None


def continued_in_body(path: str, body: bytes) -> str | None:
    """The stored object a request to a path under ``/v1/responses/`` continues, from its body
    (``POST /v1/responses/input_tokens`` with a ``previous_response_id``); parsed only when it
    names one."""
    if not path.startswith("/v1/responses/") or (b'"previous_response_id"' not in body
                                                  and b'"conversation"' not in body):  # fmt: skip
        return None
    try:
        return continued(orjson.loads(body))
    except orjson.JSONDecodeError:
        return None


def stores(payload: Any) -> bool:
    """Whether the provider keeps a Responses request's answer (``store`` defaults to true)."""
    return isinstance(payload, Mapping) and payload.get("store") is not False


def answer_id(body: bytes) -> str | None:
    """The id of the stored object a buffered answer is (a Responses answer, a conversation
    made by ``POST /v1/conversations``), else None."""
    if not any(o in body for o in _STORED_OBJECTS):
        return None
    found = _LEADING_ID.match(body)
    if found is not None:
        return found.group(1).decode()
    try:
        doc = orjson.loads(body)
    except orjson.JSONDecodeError:
        return None
    if not isinstance(doc, dict) or doc.get("object") not in ("response", "conversation"):
        return None
    return _an_id(doc.get("id"))
