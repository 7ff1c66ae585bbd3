"""Costs on the per-request and per-event paths that no behaviour test sees (issue #38).

``needle in data`` on bytes first tries ``needle`` as an integer; for a bytes needle CPython
makes, formats and drops a TypeError before it searches (~1,000 of the ~1,600 instructions of
one test under callgrind, on 3.11 to 3.13), so a stream reader that asked three such questions
per event spent more on the exceptions than on the searches. ``data.find(needle)`` is the same
search without them. These modules run per relayed event or per buffered answer.
"""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PER_EVENT = [
    "gateway/sse.py",
    "gateway/jsonpeek.py",
    "gateway/apis/chat/wire.py",
    "gateway/apis/messages/wire.py",
    "gateway/apis/responses/wire.py",
    # Per Messages request and answer: whose thinking is whose (pool-thinking's checks).
    "gateway/pipeline/reasoning_fix.py",
    "gateway/pipeline/attempt.py",
    "gateway/translate/messages_chat/stream.py",
]


def _bytes_in(source: str, names: dict[str, object]) -> list[str]:
    """Each ``in`` / ``not in`` whose needle is a bytes literal or a bytes constant in ``names``."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Compare) or not any(isinstance(op, ast.In | ast.NotIn) for op in node.ops):
            continue
        left = node.left
        if (isinstance(left, ast.Constant) and isinstance(left.value, bytes)) or (
            isinstance(left, ast.Name) and isinstance(names.get(left.id), bytes)
        ):
            found.append(f"{node.lineno}: {ast.unparse(node)}")
    return found


@pytest.mark.parametrize("path", PER_EVENT)
def test_bytes_are_searched_with_find(path: str) -> None:
    module = importlib.import_module(path.removesuffix(".py").replace("/", "."))
    assert _bytes_in((ROOT / path).read_text(), vars(module)) == []


def test_the_check_sees_a_bytes_needle() -> None:
    source = "def f(raw):\n    return b'y' in raw or _X not in raw or 3 in raw or raw.find(_X) >= 0\n"
    assert _bytes_in(source, {"_X": b"x"}) == ["2: b'y' in raw", "2: _X not in raw"]


def test_the_relays_event_loop_reads_no_enum_member_off_its_class() -> None:
    """On Python 3.11 (the shipped image's) ``EventKind.FINAL`` costs ~900 instructions more than
    a module name (callgrind); the relay's filter runs per event (gateway/pipeline/relay.py)."""
    tree = ast.parse((ROOT / "gateway/pipeline/relay.py").read_text())
    [loop] = [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == "_filter"]
    reads = [ast.unparse(n) for n in ast.walk(loop)
             if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id == "EventKind"]  # fmt: skip
    assert reads == []


@pytest.mark.parametrize("api", ["chat", "messages", "responses", "gemini"])
def test_a_stream_readers_per_event_kind_reads_no_enum_member_off_its_class(api: str) -> None:
    """Each relayed event goes through its reader's ``kind()``: the same ~900 instructions per
    member read off ``EventKind`` (a native Messages stream of 12 events: -1.4 to -2.1 %)."""
    tree = ast.parse((ROOT / f"gateway/apis/{api}/wire.py").read_text())
    methods = [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == "kind"]
    reads = [ast.unparse(n) for m in methods for n in ast.walk(m)
             if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id == "EventKind"]  # fmt: skip
    assert methods and reads == []


def test_a_translated_streams_event_tests_no_affix_with_a_parsed_argument() -> None:
    """On 3.11 ``startswith``, ``endswith`` and ``find`` parse their arguments from a format
    string (~1,000 instructions a call); a chat stream translated to Messages asked three per
    event to see a one-line ``data:`` event (Messages -> chat stream: -1.8 %)."""
    tree = ast.parse((ROOT / "gateway/translate/messages_chat/stream.py").read_text())
    [event] = [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == "event"]
    calls = [ast.unparse(n) for n in ast.walk(event) if isinstance(n, ast.Call)
             and isinstance(n.func, ast.Attribute) and n.func.attr in {"startswith", "endswith", "find"}]  # fmt: skip
    assert calls == []


def test_a_chat_streams_events_are_searched_without_find() -> None:
    """Each relayed chat event was searched five times (an error, the usage, the three end
    markers); ``find`` parses its arguments from a format string on 3.11, ``partition`` takes
    its one as it is (~500 instructions a search; Messages -> chat stream -2.6 %, chat -1.2 %)."""
    tree = ast.parse((ROOT / "gateway/apis/chat/wire.py").read_text())
    hot = [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name in {"kind", "_finished"}]
    calls = [ast.unparse(n) for f in hot for n in ast.walk(f) if isinstance(n, ast.Call)
             and isinstance(n.func, ast.Attribute) and n.func.attr == "find"]  # fmt: skip
    assert len(hot) == 2 and calls == []


@pytest.mark.parametrize("api", ["messages", "responses"])
def test_a_native_streams_events_are_searched_without_affix_or_find(api: str) -> None:
    """The same searches in the Messages and Responses readers' ``kind()``: six or seven an event
    with ``find`` and an ``endswith``. Counted: a native Messages stream 1,088,355 -> 1,045,749
    instructions a request (-3.9 %, bench.instructions); a Responses text delta's ``kind()``
    1,555 -> 1,044 ns."""
    tree = ast.parse((ROOT / f"gateway/apis/{api}/wire.py").read_text())
    methods = [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == "kind"]
    calls = [ast.unparse(n) for m in methods for n in ast.walk(m) if isinstance(n, ast.Call)
             and isinstance(n.func, ast.Attribute) and n.func.attr in {"startswith", "endswith", "find"}]  # fmt: skip
    assert methods and calls == []


def test_a_chat_or_messages_answer_is_not_searched_for_web_searches() -> None:
    """A buffered answer is read whole for searches billed outside its usage only where its API
    can carry them (Responses, Gemini): three searches a chat answer cost ~0.4 % of a request."""
    from gateway.apis import AnthropicMessages, GeminiGenerate, OpenAIChat, OpenAIResponses

    assert OpenAIChat.billed_outside_usage == AnthropicMessages.billed_outside_usage == ()
    assert OpenAIResponses.billed_outside_usage and GeminiGenerate.billed_outside_usage


def _functions(path: str, names: set[str]) -> list[ast.FunctionDef | ast.AsyncFunctionDef]:
    tree = ast.parse((ROOT / path).read_text())
    return [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef) and n.name in names]


@pytest.mark.parametrize(("path", "names", "enum"), [
    ("gateway/pipeline/forward.py", {"handle"}, "ReadMode"),
    ("gateway/pipeline/attempt.py", {"first_token_s", "_exchange"}, "ReadMode"),
    ("gateway/pipeline/send.py", {"send_one"}, "Gate"),
    ("gateway/state/shared.py", {"settled"}, "Gate"),
])  # fmt: skip
def test_a_plain_request_reads_no_enum_member_off_its_class(path: str, names: set[str], enum: str) -> None:
    """Each plain request asked its read mode three times and its circuit's gate four, each
    ~900 instructions more off the class than as a module name on 3.11 (gateway, chat buffered:
    575,442 -> 567,914 instructions a request by bench.instructions' counter, -1.3 %)."""
    functions = _functions(path, names)
    reads = [ast.unparse(n) for f in functions for n in ast.walk(f)
             if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id == enum]  # fmt: skip
    assert {f.name for f in functions} == names and reads == []


def test_a_translated_requests_credential_is_moved_without_str_format() -> None:
    """A translated request's credential moves to the upstream's header (an x-api-key to
    ``Authorization: Bearer``); ``"Bearer {}".format(key)`` costs ~1,700 instructions more than
    ``"Bearer " + key`` on 3.11. The key headers carry prefixes, not templates."""
    from gateway.routing import headers

    [move] = _functions("gateway/routing/headers.py", {"_move_credential"})
    calls = [ast.unparse(n) for n in ast.walk(move) if isinstance(n, ast.Call)
             and isinstance(n.func, ast.Attribute) and n.func.attr == "format"]  # fmt: skip
    assert calls == []
    assert all("{" not in prefix for _, prefix in headers._KEY_HEADER.values())


def test_a_translated_requests_sending_is_made_as_a_slotted_object() -> None:
    """Made for every translated request (``forward.py``): a NamedTuple's generated ``__new__``
    costs ~3,400 instructions to call on 3.11, a slotted dataclass's ``__init__`` ~2,400."""
    from gateway.pipeline.legs import Sending

    assert not issubclass(Sending, tuple) and "__slots__" in vars(Sending)


class _Reads(dict[str, object]):
    """A usage object that notes the members asked for."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)
        self.asked: list[str] = []

    def get(self, key: str, default: object = None) -> object:  # type: ignore[override]
        self.asked.append(key)
        return super().get(key, default)


def test_a_translated_answers_usage_reads_no_cache_member_that_is_not_there() -> None:
    """Every chat answer translated to Messages has its usage read (``messages_chat.answer.usage``);
    for a usage without cache members (the bench upstream's), their look-ups and type tests cost
    ~2,000 instructions an answer on 3.11."""
    from gateway.translate.messages_chat.answer import usage

    chat = _Reads(prompt_tokens=9, completion_tokens=9, total_tokens=18)
    assert usage(chat, 0) == ({"input_tokens": 9, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0,
                               "output_tokens": 9}, False)  # fmt: skip
    assert chat.asked == ["prompt_tokens", "completion_tokens"]
    # Where a server names one, it is read as before: cached tokens are not part of input_tokens.
    cached = {"prompt_tokens": 9, "completion_tokens": 1, "prompt_tokens_details": {"cached_tokens": 4}}
    assert usage(cached, 0)[0]["cache_read_input_tokens"] == 4 and usage(cached, 0)[0]["input_tokens"] == 5
    assert usage({"prompt_tokens": 9, "completion_tokens": 1, "prompt_cache_hit_tokens": 20}, 0)[0][
        "cache_read_input_tokens"] == 9  # DeepSeek's name, at most the prompt  # fmt: skip
