"""The real openai SDK's Responses client (`responses.create`, buffered and streamed, with a
function tool round) against the gateway in front of a chat-completions-only fake."""

from __future__ import annotations

from collections.abc import Iterator

import openai
import pytest

from tests.e2e.conftest import RunningGateway, launch_cli
from tests.fakeupstream import FakeUpstream, Stream, chunk

pytestmark = pytest.mark.e2e

TOOLS = [{"type": "function", "name": "get_weather", "description": "Weather in a city.",
          "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}]  # fmt: skip


@pytest.fixture(scope="module")
def gateway(fake: FakeUpstream, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningGateway]:
    gw = launch_cli(fake, tmp_path_factory.mktemp("sdkchat"), "", upstream_yaml=", apis: [chat]")
    yield gw
    gw.stop()


@pytest.fixture
def client(gateway: RunningGateway) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=gateway.base + "/v1", api_key="sk-client-key", max_retries=0) as c:
        yield c


def test_create_buffered(client: openai.OpenAI, upstream: FakeUpstream) -> None:
    r = client.responses.create(model="gpt-5", instructions="Be brief.", input="hi")
    assert r.status == "completed" and r.model == "gpt-5"
    assert r.output_text == "Hello from the fake upstream."
    assert r.usage is not None and r.usage.input_tokens == 12 and r.usage.output_tokens == 7
    assert upstream.requests[0].path == "/v1/chat/completions"


def test_stream_a_function_call_then_its_result(client: openai.OpenAI, upstream: FakeUpstream) -> None:
    upstream.script(Stream([
        chunk({"role": "assistant", "content": None, "tool_calls": [
            {"index": 0, "id": "call_w1", "type": "function", "function": {"name": "get_weather", "arguments": ""}}]}),
        chunk({"tool_calls": [{"index": 0, "function": {"arguments": '{"city":'}}]}),
        chunk({"tool_calls": [{"index": 0, "function": {"arguments": '"Paris"}'}}]}),
        chunk({}, "tool_calls"),
    ]))  # fmt: skip
    with client.responses.stream(model="gpt-5", input="Weather in Paris?", tools=TOOLS) as s:  # type: ignore[arg-type]
        first = s.get_final_response()
    [call] = [o for o in first.output if o.type == "function_call"]
    assert (call.name, call.arguments, call.call_id) == ("get_weather", '{"city":"Paris"}', "call_w1")

    second = client.responses.create(model="gpt-5", tools=TOOLS, stream=True, input=[  # type: ignore[arg-type]
        {"role": "user", "content": "Weather in Paris?"},
        {"type": "function_call", "call_id": call.call_id, "name": call.name, "arguments": call.arguments},
        {"type": "function_call_output", "call_id": call.call_id, "output": "18C, sunny"},
    ])  # fmt: skip
    text = "".join(e.delta for e in second if e.type == "response.output_text.delta")
    assert text == "Hello from fake."
    sent = upstream.requests[1].json()["messages"]
    assert sent[1]["tool_calls"][0]["id"] == "call_w1"
    assert sent[2] == {"role": "tool", "tool_call_id": "call_w1", "content": "18C, sunny"}
