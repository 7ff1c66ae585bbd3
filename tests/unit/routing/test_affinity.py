"""Conversation keys for prompt-cache affinity, on real client requests
(tests/corpus/requests/) and on hand-made edge cases: one key per conversation, bounded,
never the client's text, and never an exception."""

import copy
import json
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
from multidict import CIMultiDict

from gateway.routing.affinity import conversation_key, opens_conversation

REQUESTS = Path(__file__).parents[2] / "corpus" / "requests"
APIS = {"/v1/chat/completions": "chat", "/v1/messages": "messages", "/v1/responses": "responses"}


def _load(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((REQUESTS / name).read_text())
    return data


def _request(name: str) -> tuple[str, CIMultiDict[str], dict[str, Any]]:
    data = _load(name)
    path = data["path"].split("?")[0]
    api = "gemini" if path.startswith(("/v1beta/models/", "/v1/models/")) else APIS[path]
    return api, CIMultiDict(data.get("headers") or {}), data["body"]


def _key(name: str) -> str | None:
    return conversation_key(*_request(name))


def _body_key(name: str) -> str | None:
    """The key without any header: what the body alone says."""
    api, _, body = _request(name)
    return conversation_key(api, {}, body)


def _opening_key(name: str) -> str | None:
    """The key without any header or id in the body: the conversation's opening alone."""
    api, _, body = _request(name)
    body = {k: v for k, v in body.items() if k not in ("metadata", "prompt_cache_key")}
    return conversation_key(api, {}, body)


ALL = sorted(p.name for p in REQUESTS.glob("*.json"))


def _session_of(name: str) -> str | None:
    """The session id the client itself sent, as the capture recorded it."""
    headers = CIMultiDict(_load(name).get("headers") or {})
    return headers.get("x-claude-code-session-id") or headers.get("session-id")


SESSIONS = [n for n in ALL if _session_of(n)]


def test_the_corpus_holds_multi_turn_sessions() -> None:
    by_session: dict[str, list[str]] = {}
    for name in SESSIONS:
        by_session.setdefault(str(_session_of(name)), []).append(name)
    together = sorted(names for names in by_session.values() if len(names) > 1)
    assert together == [
        ["claude-code-2.1.197-bash-result.json", "claude-code-2.1.197-first.json"],
        ["claude-code-2.1.332-bash-result.json", "claude-code-2.1.332-first.json"],
        ["codex-0.169-exec-result.json", "codex-0.169-first.json"],
    ]


@pytest.mark.parametrize("a", SESSIONS)
@pytest.mark.parametrize("b", SESSIONS)
def test_one_key_per_client_session(a: str, b: str) -> None:
    assert (_key(a) == _key(b)) == (_session_of(a) == _session_of(b))


@pytest.mark.parametrize("name", SESSIONS)
def test_the_body_alone_gives_the_header_key(name: str) -> None:
    """Claude Code's metadata.user_id and Codex's prompt_cache_key hold the headers' id."""
    assert _body_key(name) == _key(name)


@pytest.mark.parametrize(
    ("first", "later"),
    [
        ("claude-code-2.1.197-first.json", "claude-code-2.1.197-bash-result.json"),
        ("codex-0.169-first.json", "codex-0.169-exec-result.json"),
        ("chat-ai-sdk-tool-loop-step1.json", "chat-ai-sdk-tool-loop-step2.json"),
        ("chat-opencode-agent-step1.json", "chat-opencode-agent-step2.json"),
        ("agents-sdk-0.24-first.json", "agents-sdk-0.24-tool-result.json"),
    ],
)
def test_the_opening_survives_later_turns(first: str, later: str) -> None:
    """Turns appended (and, for Claude Code, cache_control moved onto the tool_result)."""
    assert _opening_key(first) is not None
    assert _opening_key(first) == _opening_key(later)


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ("chat-opencode-agent-step1.json", "chat-opencode-title.json"),  # one run, two conversations
        ("claude-code-2.1.197-first.json", "claude-code-2.1.197-image-result.json"),
        ("codex-0.169-first.json", "codex-0.169-namespace-result.json"),
        ("chat-openai-python-stream-knobs.json", "chat-openai-python-uncarried.json"),
    ],
)
def test_other_conversations_other_openings(a: str, b: str) -> None:
    assert _opening_key(a) != _opening_key(b)


def test_claude_codes_billing_line_is_not_the_conversation() -> None:
    """It differs between runs of one version (.b79 / .001 in the corpus)."""
    api, _, body = _request("claude-code-2.1.197-first.json")
    body.pop("metadata")
    assert body["system"][0]["text"].startswith("x-anthropic-billing-header:")
    changed = copy.deepcopy(body)
    changed["system"][0]["text"] = "x-anthropic-billing-header: cc_version=2.1.197.001; cc_entrypoint=sdk-cli;"
    assert conversation_key(api, {}, changed) == conversation_key(api, {}, body)
    changed["system"][1]["text"] += " Be brief."
    assert conversation_key(api, {}, changed) != conversation_key(api, {}, body)


def test_block_metadata_is_not_the_conversation() -> None:
    api, _, body = _request("claude-code-2.1.197-first.json")
    body.pop("metadata")
    bare = copy.deepcopy(body)
    for block in [*bare["system"], *bare["messages"][0]["content"]]:
        block.pop("cache_control", None)
        block["citations"] = None
    assert conversation_key(api, {}, bare) == conversation_key(api, {}, body)


CHAT = {"messages": [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Say hello."}]}


@pytest.mark.parametrize(
    ("api", "a", "b", "same"),
    [
        # Later turns, and a system message after the first user one, leave the opening alone.
        ("chat", CHAT, {"messages": [*CHAT["messages"], {"role": "assistant", "content": "Hello."},
                                     {"role": "system", "content": "Now in French."},
                                     {"role": "user", "content": "Encore."}]}, True),
        # A string and a list of text parts are the same text; an image part is not text.
        ("chat", CHAT, {"messages": [{"role": "system", "content": [{"type": "text", "text": "You are terse."}]},
                                     {"role": "user", "content": [{"type": "text", "text": "Say hello."},
                                                                  {"type": "image_url", "image_url": {"url": "x"}}]}]},
         True),
        ("chat", CHAT, {"messages": [CHAT["messages"][0], {"role": "user", "content": "Say goodbye."}]}, False),
        ("chat", CHAT, {"messages": [{"role": "developer", "content": "You are terse."}, CHAT["messages"][1]]}, True),
        ("chat", CHAT, {"messages": [{"role": "system", "content": "You are verbose."}, CHAT["messages"][1]]}, False),
        # Which side of the system/user line a text sits on counts.
        ("chat", {"messages": [{"role": "system", "content": "a"}, {"role": "user", "content": "b"}]},
         {"messages": [{"role": "user", "content": ["a", "b"]}]}, False),
        ("messages", {"system": "You are terse.", "messages": [{"role": "user", "content": "Say hello."}]},
         {"system": [{"type": "text", "text": "You are terse.", "cache_control": {"type": "ephemeral"}}],
          "messages": [{"role": "user", "content": [{"type": "text", "text": "Say hello."}]},
                       {"role": "assistant", "content": "Hello."}]}, True),
        ("messages", {"system": "You are terse.", "messages": [{"role": "user", "content": "Say hello."}]},
         {"system": "You are terse.", "messages": [{"role": "user", "content": "Say hi."}]}, False),
        ("responses", {"instructions": "You are terse.", "input": "Say hello."},
         {"instructions": "You are terse.",
          "input": [{"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Say hello."}]},
                    {"type": "function_call", "call_id": "c", "name": "f", "arguments": "{}"}]}, True),
        ("responses", {"input": [{"role": "developer", "content": "You are terse."}, {"role": "user", "content": "Hi"}]},
         {"instructions": "You are terse.", "input": "Hi"}, True),
        ("responses", {"instructions": "You are terse.", "input": "Say hello."},
         {"instructions": "You are terse.", "input": "Say hi."}, False),
    ],
)  # fmt: skip
def test_openings(api: str, a: dict[str, Any], b: dict[str, Any], same: bool) -> None:
    ka, kb = conversation_key(api, {}, a), conversation_key(api, {}, b)
    assert ka is not None and kb is not None
    assert (ka == kb) is same


SESSION = "31ffbd70-27f6-4721-a077-429af9bf0e55"
SESSION_KEY = conversation_key("messages", {"x-claude-code-session-id": SESSION}, {})


@pytest.mark.parametrize(
    ("user_id", "same_as"),
    [
        (json.dumps({"device_id": "2ff8", "account_uuid": "", "session_id": SESSION}), SESSION),
        (f"user_2ff899ff_account__session_{SESSION}", SESSION),
        (f"user_2ff899ff_account_6c1fb775-74d1-4587_session_{SESSION}", SESSION),
        ("customer-42", "customer-42"),
        ('{"device_id": "2ff8"}', '{"device_id": "2ff8"}'),  # no session in it: the whole of it
        ('{"session_id": 7}', '{"session_id": 7}'),
        ("{not json", "{not json"),
        ("user_abc_session_", "user_abc_session_"),
    ],
)
def test_claude_code_user_ids(user_id: str, same_as: str) -> None:
    body = {"metadata": {"user_id": user_id}, "messages": [{"role": "user", "content": "hi"}]}
    assert conversation_key("messages", {}, body) == conversation_key("messages", {"session-id": same_as}, {})


def test_user_id_is_the_messages_apis_and_needs_a_string() -> None:
    opening = conversation_key("messages", {}, {"messages": [{"role": "user", "content": "hi"}]})
    for metadata in ({"user_id": 42}, {"user_id": "  "}, "user_1", None):
        body = {"metadata": metadata, "messages": [{"role": "user", "content": "hi"}]}
        assert conversation_key("messages", {}, body) == opening
    chat = {"metadata": {"user_id": SESSION}, "messages": [{"role": "user", "content": "hi"}]}
    assert conversation_key("chat", {}, chat) != SESSION_KEY


@pytest.mark.parametrize(
    "headers",
    [
        CIMultiDict({"X-Claude-Code-Session-Id": SESSION}),
        CIMultiDict({"Session-Id": SESSION}),
        CIMultiDict({"thread-id": SESSION}),
        CIMultiDict({"Session_id": SESSION}),
        CIMultiDict({"conversation_id": f"  {SESSION} "}),
        {"session-id": SESSION},  # a plain dict, lower-cased
        # The first trusted header wins over later ones and over the body.
        CIMultiDict({"X-Claude-Code-Session-Id": SESSION, "session-id": "other", "thread-id": "other"}),
    ],
)
def test_session_headers(headers: Mapping[str, str]) -> None:
    body = {"prompt_cache_key": "other", "metadata": {"user_id": "other"}, "input": "hi"}
    assert conversation_key("responses", headers, body) == SESSION_KEY


@pytest.mark.parametrize(
    "headers",
    [
        {"x-client-request-id": SESSION},  # named for one request
        {"x-codex-window-id": f"{SESSION}:0"},  # its suffix counts compactions
        {"session-id": ""},
        {"session-id": "   "},
    ],
)
def test_headers_that_are_not_a_session(headers: dict[str, str]) -> None:
    body = {"input": "hi"}
    assert conversation_key("responses", headers, body) == conversation_key("responses", {}, body)


@pytest.mark.parametrize(
    ("api", "body"),
    [
        ("responses", {"prompt_cache_key": SESSION, "input": "hi"}),
        ("chat", {"prompt_cache_key": SESSION, "messages": [{"role": "user", "content": "hi"}]}),
        ("responses", {"conversation": SESSION, "input": "hi"}),
        ("responses", {"conversation": {"id": SESSION}, "input": "hi"}),
        ("responses", {"conversation": {"id": SESSION}, "prompt_cache_key": "other", "input": "hi"}),
        # An id needs no opening: a chained Responses turn is still placed by it.
        ("responses", {"prompt_cache_key": SESSION, "previous_response_id": "resp_1", "input": "more"}),
    ],
)
def test_body_ids(api: str, body: dict[str, Any]) -> None:
    assert conversation_key(api, {}, body) == SESSION_KEY


@pytest.mark.parametrize(
    ("api", "body"),
    [
        ("chat", {}),
        ("chat", {"messages": []}),
        ("messages", {"messages": []}),
        ("messages", {"system": [{"type": "text", "text": "x-anthropic-billing-header: cc_version=1;"}]}),
        ("responses", {}),
        ("responses", {"input": []}),
        # Only the new turn of a chained conversation: not its opening.
        ("responses", {"previous_response_id": "resp_1", "instructions": "Be terse.", "input": "more"}),
        # Content that is no text.
        ("chat", {"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]}),
        ("chat", {"messages": "hello"}),
        ("chat", {"messages": [1, None, {"role": "user", "content": 5}]}),
        ("chat", ["not", "a", "mapping"]),
        ("responses", None),
    ],
)
def test_nothing_to_tell(api: str, body: Any) -> None:
    assert conversation_key(api, {}, body) is None


@pytest.mark.parametrize(
    ("api", "body"),
    [
        ("messages", {"system": {"text": "odd"}, "messages": [{"role": "user", "content": [1, None, "x", {"text": 5}]}]}),
        ("messages", {"metadata": {"user_id": '{"session_id": "\\ud800"}'}, "messages": []}),
        ("messages", {"metadata": {"user_id": "{" + "[" * 5000}}),
        ("chat", {"messages": [{"role": "system", "content": "\ud800"}, {"role": "user", "content": "\udcff"}]}),
        ("responses", {"instructions": 7, "input": ["a", {"role": "user"}, {"role": "user", "content": None}]}),
        ("responses", {"conversation": {"id": 5}, "prompt_cache_key": 9, "input": {"role": "user"}}),
        ("chat", {"messages": [{"role": "system"}, {"role": "user", "content": {"text": "hi"}}]}),
    ],
)  # fmt: skip
def test_garbage_never_raises(api: str, body: Any) -> None:
    key = conversation_key(api, {}, body)
    assert key is None or len(key) <= 40


@pytest.mark.parametrize("name", ALL)
def test_keys_are_bounded_and_opaque(name: str) -> None:
    for key in (_key(name), _body_key(name), _opening_key(name)):
        assert key is not None and len(key) <= 40
        assert (_session_of(name) or "\0") not in key
    long = "s" * 100_000
    key = conversation_key("chat", {"session-id": long}, {})
    assert key is not None and len(key) <= 40 and "sss" not in key


class _Untouchable(Mapping[str, Any]):
    """A body that fails the test if anything reads it."""

    def __getitem__(self, key: str) -> Any:
        raise AssertionError(f"read body[{key!r}]")

    def __iter__(self) -> Iterator[str]:
        raise AssertionError("iterated the body")

    def __len__(self) -> int:
        raise AssertionError("measured the body")


def test_a_header_id_decides_without_reading_the_body() -> None:
    assert conversation_key("messages", {"x-claude-code-session-id": SESSION}, _Untouchable()) == SESSION_KEY


@pytest.mark.parametrize(
    ("api", "body", "first"),
    [
        ("chat", {"messages": [{"role": "system", "content": "s"}, {"role": "user", "content": "q"}]}, True),
        ("chat", {"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"},
                               {"role": "user", "content": "q2"}]}, False),
        ("chat", {"messages": [{"role": "user", "content": "q"}, {"role": "tool", "content": "r"}]}, False),
        ("messages", {"system": "s", "messages": [{"role": "user", "content": [{"type": "text", "text": "q"}]}]}, True),
        ("messages", {"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}]}, False),
        ("messages", {"messages": [{"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t"}]}]},
         False),
        ("responses", {"input": "q"}, True),
        ("responses", {"input": [{"role": "developer", "content": "s"}, {"role": "user", "content": "q"}]}, True),
        ("responses", {"input": "q", "previous_response_id": "resp_1"}, False),
        ("responses", {"input": "q", "conversation": "conv_1"}, False),
        ("responses", {"input": [{"role": "user", "content": "q"}, {"type": "function_call", "call_id": "c"}]}, False),
        ("responses", {"input": [{"type": "message", "role": "assistant", "content": "a"}]}, False),
        ("gemini", {"contents": [{"role": "user", "parts": [{"text": "q"}]}]}, True),
        ("gemini", {"contents": [{"parts": [{"text": "q"}]}, {"role": "model", "parts": [{"text": "a"}]}]}, False),
        ("gemini", {"contents": [{"role": "user", "parts": [{"functionResponse": {"name": "f"}}]}]}, False),
        ("chat", {"messages": "not a list"}, False),
        ("gemini", {}, False),
    ],
)
def test_a_request_opens_its_conversation_only_without_an_earlier_answer(
    api: str, body: dict[str, Any], first: bool
) -> None:
    assert opens_conversation(api, body) is first
