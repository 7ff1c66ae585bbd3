"""The google-genai Python SDK itself through the gateway to a chat-completions-only upstream:
buffered, streamed, a function call and its response, count_tokens, the model list, a
structured output whose root is a list or an enum, and an upstream rate limit the SDK raises as
``APIError`` 429 RESOURCE_EXHAUSTED.

The SDK is no dependency of the gateway: it runs in its own interpreter (``GENAI_PYTHON``, else
``.venv-genai/bin/python``, which scripts/test-deps.sh makes), driven by ``DRIVER`` below,
which prints one JSON document of what the SDK returned; the test reads it and what the
upstream was sent. google-genai 3.6 calls ``/v1/models/...`` with ``x-goog-api-key``.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.conftest import ROOT, RunningGateway, launch_cli
from tests.e2e.test_codex_chat import text
from tests.fakeupstream import FakeUpstream, Reply, chat_completion

pytestmark = pytest.mark.e2e

GENAI_PYTHON = Path(os.environ.get("GENAI_PYTHON") or ROOT / ".venv-genai" / "bin" / "python")

DRIVER = Path(__file__).with_name("genai_driver.py")


@pytest.fixture(scope="module")
def genai_python() -> Path:
    if not GENAI_PYTHON.exists():
        pytest.skip(f"no interpreter with google-genai at {GENAI_PYTHON} (scripts/test-deps.sh makes one)")
    found = subprocess.run([str(GENAI_PYTHON), "-c", "import google.genai"], capture_output=True, check=False)
    if found.returncode != 0:
        pytest.skip(f"google-genai is not importable by {GENAI_PYTHON}")
    return GENAI_PYTHON


@pytest.fixture(scope="module")
def genai_gateway(fake: FakeUpstream, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningGateway]:
    gw = launch_cli(fake, tmp_path_factory.mktemp("genaichat"), "retry: {rate_limit: {max_retries: 0}}\n",
                    upstream_yaml=", apis: [chat], model_map: {'gemini-*': qwen}")  # fmt: skip
    yield gw
    gw.stop()


def tool_completion(call_id: str, name: str, args: str) -> Reply:
    doc = chat_completion(model="qwen", content="")
    doc["choices"][0]["message"]["tool_calls"] = [
        {"id": call_id, "type": "function", "function": {"name": name, "arguments": args}}
    ]
    doc["choices"][0]["finish_reason"] = "tool_calls"
    return Reply(200, doc)


def drive(python: Path, gw: RunningGateway, scenario: str, *model: str) -> dict[str, Any]:
    done = subprocess.run([str(python), str(DRIVER), gw.base, scenario, *model], capture_output=True, text=True,
                          timeout=120, env={"PATH": os.environ["PATH"], "HOME": os.environ.get("HOME", "/tmp")})  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def test_sdk_buffered_streamed_counted_and_listed(
    genai_python: Path, genai_gateway: RunningGateway, upstream: FakeUpstream
) -> None:
    upstream.script(Reply(200, chat_completion(model="qwen", content="Hi there.")), text(("Hel", "lo!")))
    out = drive(genai_python, genai_gateway, "listed")
    assert out["text"] == "Hi there." and out["finish"] == "STOP"
    assert out["usage"]["total_token_count"] == out["usage"]["prompt_token_count"] + out["usage"][
        "candidates_token_count"
    ]
    assert "".join(t or "" for t in out["stream"]) == "Hello!" and out["stream_finish"] == "STOP"
    assert out["count"] > 0
    assert out["models"] == ["models/gpt-4o-mini"]  # the upstream's list, as Google names a model
    first, second = (r.json() for r in upstream.requests if r.path == "/v1/chat/completions")
    assert first["messages"][0] == {"role": "system", "content": "Be brief."} and "stream" not in first
    assert second["stream"] is True


def test_sdk_function_call_and_response_keep_the_upstreams_call_id(
    genai_python: Path, genai_gateway: RunningGateway, upstream: FakeUpstream
) -> None:
    upstream.script(tool_completion("call_w1", "get_weather", '{"city": "Paris"}'),
                    Reply(200, chat_completion(model="qwen", content="Sunny.")))  # fmt: skip
    out = drive(genai_python, genai_gateway, "tools")
    assert out["call"] == {"id": "call_w1", "name": "get_weather", "args": {"city": "Paris"}}
    assert out["text"] == "Sunny."
    second = upstream.requests[-1].json()
    assistant, tool = second["messages"][-2:]
    assert assistant["tool_calls"][0]["id"] == tool["tool_call_id"] == "call_w1"
    assert tool["content"] == "sunny, 21C"
    assert second["tools"][0]["function"]["parameters"] == {
        "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]
    }  # fmt: skip


def test_sdk_parses_a_list_and_an_enum_its_schema_asked_for(
    genai_python: Path, genai_gateway: RunningGateway, upstream: FakeUpstream
) -> None:
    """``response_schema=list[Recipe]``: OpenAI takes only an object root, so the list goes
    inside one and comes back out (the fake refuses an array root in OpenAI's words)."""
    recipe = {"recipe_name": "Shortbread", "ingredients": ["butter", "sugar", "flour"]}
    wrapped = json.dumps({"response": [recipe]})
    upstream.script(Reply(200, chat_completion(model="qwen", content=wrapped)),
                    text((wrapped[:25], wrapped[25:])),
                    Reply(200, chat_completion(model="qwen", content='{"response": "Woodwind"}')))  # fmt: skip
    out = drive(genai_python, genai_gateway, "recipes")
    assert out["parsed"] == [recipe]
    assert [json.loads(t) for t in out["stream"] if t] == [[recipe]]  # held to the end: one part
    assert out["enum"] == ["Woodwind", "Woodwind"]
    sent = [r.json() for r in upstream.requests if r.path == "/v1/chat/completions"]
    assert [s["response_format"]["json_schema"]["schema"]["type"] for s in sent] == ["object"] * 3


def test_sdk_raises_an_upstream_rate_limit_as_resource_exhausted_with_retry_info(
    genai_python: Path, genai_gateway: RunningGateway, upstream: FakeUpstream
) -> None:
    error = {"error": {"message": "Rate limit reached, try again in 7s", "type": "requests",
                       "code": "rate_limit_exceeded"}}  # fmt: skip
    upstream.script(*[Reply(429, error, headers={"retry-after": "7"})] * 3)
    out = drive(genai_python, genai_gateway, "error")
    assert out["code"] == 429 and out["status"] == "RESOURCE_EXHAUSTED"
    details = out["details"]["error"]["details"]
    assert {"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "7s"} in details


def test_an_empty_answer_has_no_parts_and_the_sdks_chat_leaves_it_out_of_its_history(
    genai_python: Path, genai_gateway: RunningGateway, upstream: FakeUpstream
) -> None:
    """A model that spent its tokens before any word (a thinking model at its limit): Google
    sends the candidate's content with no parts (``{"role": "model"}``, google/adk-python#1357),
    ``response.text`` is None, and the SDK's chat drops that exchange from the history it sends
    next. An empty text part made it an answer: ``text`` "" and the next request carried the
    failed exchange (user, an empty model turn, user)."""
    spent = chat_completion(model="qwen", content="")
    spent["choices"][0]["finish_reason"] = "length"
    upstream.script(Reply(200, spent), Reply(200, chat_completion(model="qwen", content="Sure.")))
    out = drive(genai_python, genai_gateway, "empty")
    assert out["text"] is None and out["finish"] == "MAX_TOKENS"
    assert out["second"] == "Sure." and out["history"] == ["user", "model"]
    second = upstream.requests[-1].json()
    assert second["messages"] == [{"role": "user", "content": "again"}]
