"""The shared readers of a client's request fields (``translate/typed.py``) and the 400 a wrong
JSON type gets in each client API's words."""

from __future__ import annotations

from typing import Any

import pytest

from gateway.translate import typed
from gateway.translate.typed import WrongType

AT = ("messages", 0, "content")


@pytest.mark.parametrize(
    ("read", "good", "bad"),
    [
        (typed.text, "hi", [5, 1.5, True, [], {}]),
        (typed.items, [1], [5, "x", True, {}]),
        (typed.obj, {"a": 1}, [5, "x", True, []]),
        (typed.number, 1.5, ["1", True, [], {}]),
        (typed.integer, 3, [1.5, "3", False, []]),
        (typed.flag, False, [0, "true", [], {}]),
    ],
)
def test_a_reader_returns_its_type_passes_null_and_raises_on_any_other(read: Any, good: Any, bad: list[Any]) -> None:
    assert read(good, AT) == good
    assert read(None, AT) in (None, [])
    for value in bad:
        with pytest.raises(WrongType) as raised:
            read(value, AT)
        assert raised.value.path == AT


def test_a_bool_is_not_a_number_as_json_has_it() -> None:
    assert typed.json_type(True) == "boolean" and typed.json_type(1) == "integer" and typed.json_type(1.0) == "number"
    with pytest.raises(WrongType):
        typed.integer(True, AT)


@pytest.mark.parametrize(
    ("client", "message"),
    [
        ("chat", "Invalid type for 'messages[0].content': expected one of a string or an array, but got an "
                 "integer instead."),
        ("responses", "Invalid type for 'messages[0].content': expected one of a string or an array, but got an "
                      "integer instead."),
        ("messages", "messages.0.content: Input should be a valid string or list"),
        ("gemini", "Invalid value at 'messages[0].content': expected a string or an array, got an integer"),
    ],
)
def test_the_refusal_names_the_field_as_the_clients_api_does(client: str, message: str) -> None:
    refusal = typed.refusal(typed.wrong(5, AT, "string", "array"), client)
    assert refusal.message == message and refusal.code == "invalid_type"


def test_the_refusal_never_quotes_the_value() -> None:
    secret = "the user's private prompt"
    for client in ("chat", "responses", "messages", "gemini"):
        with pytest.raises(WrongType) as raised:
            typed.obj([secret], ("tools",))
        message = typed.refusal(raised.value, client).message
        assert secret not in message and "tools" in message


def test_one_type_and_null_read_as_the_api_says_them() -> None:
    assert typed.refusal(WrongType(("n",), ("integer",), None), "chat").message == (
        "Invalid type for 'n': expected an integer, but got null instead.")  # fmt: skip
    assert typed.refusal(WrongType(("tools",), ("array",), {}), "messages").message == (
        "tools: Input should be a valid list")  # fmt: skip
