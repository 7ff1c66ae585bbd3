"""``GET /v1/models`` in the shapes clients parse: OpenAI's, Anthropic's and Google's.

OpenAI (platform.openai.com/docs/api-reference/models/list): ``{"object": "list", "data":
[{"id", "object": "model", "created": <unix seconds>, "owned_by"}]}``.
Anthropic (docs.claude.com/en/api/models-list): ``{"data": [{"type": "model", "id",
"display_name", "created_at": <RFC 3339>}], "has_more", "first_id", "last_id"}``, where
``created_at`` "may be set to an epoch value if the release date is unknown".

Google (https://ai.google.dev/api/models#method:-models.list): ``{"models": [{"name":
"models/<id>", "baseModelId", "version", "displayName", "supportedGenerationMethods", …}],
"nextPageToken"}`` (ListModelsResponse: "models — The returned Models. next_page_token — A
token, which can be sent as page_token to retrieve the next page",
https://ai.google.dev/api/python/google/ai/generativelanguage/ListModelsResponse); the
google-genai SDKs and Gemini CLI read ``name`` and strip ``models/``.

A client gets its own shape whatever its upstreams answered in: Claude Code's model discovery
and the ``anthropic`` SDK read Anthropic's, Codex and the ``openai`` SDK OpenAI's, the
google-genai SDK Google's. An entry already in the wanted shape is passed on as it came (with
whatever else its provider said).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

_EPOCH = "1970-01-01T00:00:00Z"


OPENAI, ANTHROPIC, GOOGLE = "openai", "anthropic", "google"
# What the gateway serves of the Gemini API for every model (all of it translated).
GEMINI_METHODS = ("generateContent", "streamGenerateContent", "countTokens")


def gemini_model(mid: str, input_limit: int | None = None) -> dict[str, Any]:
    """A Gemini API ``Model`` for a model the gateway routes; ``inputTokenLimit`` only when
    the upstream's context_window says it."""
    out: dict[str, Any] = {
        "name": f"models/{mid}", "baseModelId": mid, "version": "gateway", "displayName": mid,
        "supportedGenerationMethods": list(GEMINI_METHODS),
    }  # fmt: skip
    if input_limit:
        out["inputTokenLimit"] = input_limit
    return out


def listed(doc: Any) -> tuple[list[tuple[str, dict[str, Any]]], bool] | None:
    """An upstream's model list as (id, entry) pairs, and whether it says more pages follow;
    None when ``doc`` is no list of models. OpenAI's and Anthropic's ``data`` entries are named
    by ``id``, Google's ``models`` by ``name`` (``models/<id>``)."""
    if not isinstance(doc, dict):
        return None
    data = doc.get("data")
    if isinstance(data, list):
        pairs = [(m["id"], m) for m in data if isinstance(m, dict) and isinstance(m.get("id"), str)]
        return pairs, doc.get("has_more") is True  # Anthropic pages; the client may ask on
    models = doc.get("models")
    if isinstance(models, list):
        named = [m for m in models if isinstance(m, dict) and _google_named(m.get("name"))]
        return [(m["name"][7:], m) for m in named], False
    return None


def _google_named(name: Any) -> bool:
    return isinstance(name, str) and name.startswith("models/") and len(name) > 7


def entry(model: dict[str, Any], mid: str, shape: str, owner: str) -> dict[str, Any]:
    """``model`` (an OpenAI, Anthropic or Google entry for the model ``mid``) in the wanted
    shape; ``owner``: who serves it (OpenAI's ``owned_by`` when the entry names none)."""
    if shape == GOOGLE:
        return model if model.get("name") == f"models/{mid}" else gemini_model(mid)
    if shape == ANTHROPIC:
        if model.get("type") == "model":
            return model
        name = model.get("display_name") or model.get("displayName")
        return {"type": "model", "id": mid, "display_name": name if isinstance(name, str) and name else mid,
                "created_at": _rfc3339(model.get("created"))}  # fmt: skip
    if model.get("object") == "model":
        return model
    owned = model.get("owned_by")
    return {"id": mid, "object": "model", "created": _unix(model.get("created_at")),
            "owned_by": owned if isinstance(owned, str) and owned else owner}  # fmt: skip


def listing(data: list[dict[str, Any]], shape: str, has_more: bool) -> dict[str, Any]:
    if shape == GOOGLE:
        return {"models": data}
    if shape == OPENAI:
        return {"object": "list", "data": data}
    first, last = (data[0]["id"], data[-1]["id"]) if data else (None, None)
    return {"data": data, "has_more": has_more, "first_id": first, "last_id": last}


def _rfc3339(created: Any) -> str:
    if not isinstance(created, int | float) or isinstance(created, bool):
        return _EPOCH
    try:
        return datetime.fromtimestamp(created, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    except (OverflowError, OSError, ValueError):
        return _EPOCH


def _unix(created_at: Any) -> int:
    if not isinstance(created_at, str):
        return 0
    try:
        when = datetime.fromisoformat(created_at.replace("Z", "+00:00"))
    except ValueError:
        return 0
    return int(when.timestamp()) if when.tzinfo is not None else int(when.replace(tzinfo=UTC).timestamp())
