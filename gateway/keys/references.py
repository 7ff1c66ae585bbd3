"""What a request names without sending: attachments by reference, reserved at a set figure.

A key's reservation estimates the prompt from the request's bytes (gateway/policy/tokens.py).
An attachment named by reference is fetched by the provider and counted as prompt tokens all
the same, though its bytes are not in the request: 50 requests with a PDF by URL, on a $0.20
budget, each reserved as its few dozen bytes, spent $2.52 (the provider counted 2,000 tokens
each). So each one counts a set figure (``accounting.reference_tokens``), by kind:

* a document: 25,000 tokens. Anthropic: "Each page typically uses 1,500-3,000 tokens per page
  depending on content density", and "each page is converted into an image, the same
  image-based cost calculations are applied"
  (https://platform.claude.com/docs/en/build-with-claude/pdf-support): about five pages at the
  top of that range with each page's image. Gemini's ``cachedContent`` (a cached context) and
  a ``fileData`` that is not an image count as one: what they hold is not known here.
* an image: 2,500 tokens. Anthropic scales down an image "more than ~1,600 tokens"
  (https://docs.claude.com/en/docs/vision, "Evaluate image size"); OpenAI's patch-priced
  models count 32-px patches "capped at 1536 patches", times 1.62 for gpt-5-mini
  (https://developers.openai.com/api/docs/guides/images-vision#calculating-costs, as quoted by
  the image-cost calculators that implement it): 2,489.

Neither is a bound: a longer document, a larger cached context or a video costs what the
provider counts, and the settle takes that (docs/keys.md says what stays unbounded).

Named by reference (inline data, a ``data:`` URL or base64, is in the bytes, and counted there):

* Anthropic Messages: an ``image`` or ``document`` whose ``source.type`` is ``url`` or ``file``.
* OpenAI chat: an ``image_url`` whose URL is not ``data:``; a ``file`` with ``file.file_id``
  (and no ``file_data``): a document.
* OpenAI Responses: an ``input_image`` with ``file_id``, or an ``image_url`` not ``data:``; an
  ``input_file`` with ``file_id`` or ``file_url`` (and no ``file_data``): a document.
* Gemini: a ``fileData`` part, an image by its ``image/`` ``mimeType``, else a document; a
  ``cachedContent``: a document.

Only a key with a budget or ``tokens_per_minute`` is scanned (``KeySpec.counts_tokens``), and
only where the APIs put content, not tool calls or schemas: about as long as parsing the body
took (45-60 us for a 30-turn agent conversation of 70 KB, chat or Messages); nothing for a key
the prompt's size does not matter to.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

# Where the four APIs put what the model reads: chat and Messages ``messages`` (Messages'
# ``system`` too), Responses ``input``, Gemini ``contents`` and its system instruction.
_CONTENT = ("messages", "system", "input", "contents", "systemInstruction", "system_instruction")
# Where content nests besides ``content`` (a message's, Anthropic's tool result's): Responses'
# ``function_call_output.output``, Gemini's ``parts`` and ``functionResponse`` (whose own
# ``parts`` may hold files).
_NESTS = ("output", "parts", "functionResponse", "function_response")
_IMAGE, _DOCUMENT = 1, 2
_TYPES = frozenset(("image", "document", "image_url", "input_image", "file", "input_file"))


@dataclass(frozen=True, slots=True)
class ReferenceTokens:
    """The prompt tokens each attachment named by reference is reserved as."""

    document: int = 25_000
    image: int = 2_500

    def of(self, payload: Mapping[str, Any]) -> int:
        documents, images = referenced(payload)
        return documents * self.document + images * self.image


def referenced(payload: Mapping[str, Any]) -> tuple[int, int]:
    """How many documents and images ``payload`` names by reference, in any of the APIs."""
    documents = images = 0
    cached = payload.get("cachedContent", payload.get("cached_content"))
    if isinstance(cached, str) and cached:
        documents += 1
    stack: list[Any] = [v for k in _CONTENT if isinstance(v := payload.get(k), (list, dict))]
    while stack:
        node = stack.pop()
        if isinstance(node, list):
            stack += node
            continue
        if not isinstance(node, dict):
            continue
        kind = node.get("type")
        if isinstance(kind, str):
            part = kind in _TYPES
        else:  # Gemini's parts have no type
            part = kind is None and ("fileData" in node or "file_data" in node)
        if part:
            found = _kind(node)
            images += found == _IMAGE
            documents += found == _DOCUMENT
            continue
        # Only where content nests (a message's, a tool result's, Gemini's parts and function
        # responses): never a tool call's arguments or a schema. Most nodes have ``content``
        # (and then none of the others).
        inner = node.get("content")
        if inner is None:
            for name in _NESTS:
                inner = node.get(name)
                if inner is not None:
                    break
        if isinstance(inner, (list, dict)):
            stack.append(inner)
    return documents, images


def _kind(part: Mapping[str, Any]) -> int:
    kind = part.get("type")
    if kind in ("image", "document"):  # Anthropic
        source = part.get("source")
        if isinstance(source, dict) and source.get("type") in ("url", "file"):
            return _IMAGE if kind == "image" else _DOCUMENT
    elif kind == "image_url":  # chat
        value = part.get("image_url")
        url = value.get("url") if isinstance(value, dict) else value
        if isinstance(url, str) and not url.startswith("data:"):
            return _IMAGE
    elif kind == "input_image":  # Responses
        url = part.get("image_url")
        if part.get("file_id") or (isinstance(url, str) and not url.startswith("data:")):
            return _IMAGE
    elif kind == "file":  # chat
        file = part.get("file")
        if isinstance(file, dict) and file.get("file_id") and not file.get("file_data"):
            return _DOCUMENT
    elif kind == "input_file":  # Responses
        if not part.get("file_data") and (part.get("file_id") or part.get("file_url")):
            return _DOCUMENT
    elif kind is None:  # Gemini's parts have no type
        data = part.get("fileData", part.get("file_data"))
        if isinstance(data, dict):
            mime = data.get("mimeType", data.get("mime_type"))
            return _IMAGE if isinstance(mime, str) and mime.startswith("image/") else _DOCUMENT
    return 0
