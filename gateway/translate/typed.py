"""The JSON types a translator reads a client's request with, and the 400 a wrong one gets.

A translated request is walked by the gateway before any server of the client's API has seen
it: nothing has checked that ``messages[0].content`` is a string or a list when the translator
reads it. A field of the wrong type is the client's mistake, so it is refused the way that API's
own server would refuse it: a 400 in the client's envelope, code ``invalid_type``, naming the
field as the client's API names it (``messages[0].content``, ``messages.0.content``), and never
its value, which may be prompt text. Left to the walk, it was a TypeError and a 500
``internal_error``, which SDKs retry and which reads as a bug in the gateway.

The readers return the value when it has the type and None when the field is absent or null
(``items``: an empty list), and raise ``WrongType`` otherwise; the translator's entry point
turns that into a ``Refusal`` worded for its client (``refusal``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from gateway.translate.base import Refusal

Path = tuple[str | int, ...]
T = TypeVar("T")


class WrongType(Exception):
    """A field of the client's request whose JSON type its API does not allow there."""

    def __init__(self, path: Path, expected: tuple[str, ...], value: Any) -> None:
        super().__init__(path, expected)
        self.path, self.expected, self.got = path, expected, json_type(value)


def json_type(value: Any) -> str:
    """The JSON type of a decoded value, in JSON Schema's words."""
    if value is None:
        return "null"
    if isinstance(value, bool):  # before int: a bool is an int to Python, not to JSON
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    return "array" if isinstance(value, list) else "object"


def top(payload: Mapping[str, Any], key: str, read: Callable[[Any, Path], T]) -> T:
    """A top-level field of the request, read by one of the readers below."""
    return read(payload.get(key), (key,))


def wrong(value: Any, path: Path, *expected: str) -> WrongType:
    """For a union the readers below do not cover: ``raise wrong(v, path, "string", "array")``."""
    return WrongType(path, expected, value)


def text(value: Any, path: Path) -> str | None:
    if value is None or isinstance(value, str):
        return value
    raise WrongType(path, ("string",), value)


def items(value: Any, path: Path) -> list[Any]:
    if isinstance(value, list):
        return value
    if value is None:
        return []
    raise WrongType(path, ("array",), value)


def objects(value: Any, path: Path) -> list[dict[str, Any]]:
    """A list of objects (messages, parts, tools); an empty one when absent or null."""
    found = items(value, path)
    for k, item in enumerate(found):
        if not isinstance(item, dict):
            raise WrongType((*path, k), ("object",), item)
    return found


def strings(value: Any, path: Path, one: bool = False) -> list[str]:
    """A list of strings (an empty one when absent or null); with ``one``, a lone string
    stands for a list of it (chat's ``stop``)."""
    if one and isinstance(value, str):
        return [value]
    if not isinstance(value, list | None):
        raise WrongType(path, ("string", "array") if one else ("array",), value)
    found = value or []
    for k, item in enumerate(found):
        if not isinstance(item, str):
            raise WrongType((*path, k), ("string",), item)
    return found


def content(value: Any, path: Path) -> str | list[dict[str, Any]] | None:
    """A message's content as chat completions, Messages and Responses all have it: a string,
    or a list of objects (parts, blocks)."""
    if value is None or isinstance(value, str):
        return value
    if not isinstance(value, list):
        raise WrongType(path, ("string", "array"), value)
    return objects(value, path)


def obj(value: Any, path: Path) -> dict[str, Any] | None:
    if value is None or isinstance(value, dict):
        return value
    raise WrongType(path, ("object",), value)


def number(value: Any, path: Path) -> int | float | None:
    if value is None or (isinstance(value, int | float) and not isinstance(value, bool)):
        return value
    raise WrongType(path, ("number",), value)


def integer(value: Any, path: Path) -> int | None:
    if value is None or (isinstance(value, int) and not isinstance(value, bool)):
        return value
    raise WrongType(path, ("integer",), value)


def flag(value: Any, path: Path) -> bool | None:
    if value is None or isinstance(value, bool):
        return value
    raise WrongType(path, ("boolean",), value)


# --- the refusal, in each client API's words ---------------------------------------------


def _a(word: str) -> str:
    if word == "null":
        return word
    return f"an {word}" if word[0] in "aeiou" else f"a {word}"


def bracketed(path: Path) -> str:
    """OpenAI's and Google's way to name a field: ``messages[0].content``."""
    return "".join(f"[{p}]" if isinstance(p, int) else f".{p}" if i else p for i, p in enumerate(path))


def _openai(e: WrongType) -> str:
    wanted = " or ".join(_a(t) for t in e.expected)
    wanted = wanted if len(e.expected) == 1 else f"one of {wanted}"
    return f"Invalid type for '{bracketed(e.path)}': expected {wanted}, but got {_a(e.got)} instead."


# Pydantic's names for the JSON types, which Anthropic's validation errors use.
_PYDANTIC = {"array": "list", "object": "dictionary"}


def _anthropic(e: WrongType) -> str:
    wanted = " or ".join(_PYDANTIC.get(t, t) for t in e.expected)
    return f"{'.'.join(str(p) for p in e.path)}: Input should be a valid {wanted}"


def _google(e: WrongType) -> str:
    wanted = " or ".join(_a(t) for t in e.expected)
    return f"Invalid value at '{bracketed(e.path)}': expected {wanted}, got {_a(e.got)}"


_WORDS: dict[str, Callable[[WrongType], str]] = {
    "chat": _openai, "responses": _openai, "messages": _anthropic, "gemini": _google,
}  # fmt: skip


def refusal(e: WrongType, client: str) -> Refusal:
    """``e`` as the 400 a client of the API ``client`` gets."""
    return Refusal(_WORDS[client](e), "invalid_type")
