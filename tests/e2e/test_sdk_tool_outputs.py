"""docs/tool-outputs.md's "application with API tools" config, run as written, with the real `openai` SDK
sending a tool loop's second step: the search result projected to the fields the rule
names, the CRM error body projected, the oversized SQL result excluded with the
structured result; what the upstream received, and /metrics."""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Iterator

import pytest

from tests.e2e.conftest import RunningGateway, launch_cli
from tests.fakeupstream import FakeUpstream
from tests.unit.policy.test_tool_output_policy import readme_example

pytestmark = pytest.mark.e2e

SEARCH = {"query": "llm gateway", "results": [
    {"title": f"Result {i}", "url": f"https://example.org/{i}", "snippet": f"about {i}",
     "html": "<p>" + "markup " * 80 + "</p>", "rank": i} for i in range(6)]}  # fmt: skip
CRM = {"status": 404, "id": "acct-9", "error": "account not found", "trace": ["frame"] * 200}
ROWS = {"rows": [{"id": i, "email": f"ROW-{i:05d}@example.org"} for i in range(3000)]}


@pytest.fixture(scope="module")
def app_gateway(fake: FakeUpstream, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningGateway]:
    gw = launch_cli(fake, tmp_path_factory.mktemp("apptools"), readme_example("application with API tools:"))
    yield gw
    gw.stop()


def call(cid: str, name: str) -> dict[str, object]:
    return {"id": cid, "type": "function", "function": {"name": name, "arguments": "{}"}}


def test_the_application_example_projects_and_excludes_with_the_sdk(sdk, app_gateway, upstream: FakeUpstream) -> None:
    client = sdk(app_gateway)
    messages = [
        {"role": "user", "content": "Who is acct-9 and what does the web say about us?"},
        {"role": "assistant", "content": None,
         "tool_calls": [call("c1", "search_web"), call("c2", "crm_get_account"), call("c3", "run_sql")]},
        {"role": "tool", "tool_call_id": "c1", "content": json.dumps(SEARCH)},
        {"role": "tool", "tool_call_id": "c2", "content": json.dumps(CRM)},
        {"role": "tool", "tool_call_id": "c3", "content": json.dumps(ROWS)},
    ]  # fmt: skip
    answer = client.chat.completions.create(model="gpt-4o-mini", messages=messages)  # type: ignore[arg-type]
    assert answer.choices[0].message.content == "Hello from the fake upstream."
    [sent] = upstream.chat_requests()
    body = sent.json()
    tools = {m["tool_call_id"]: m["content"] for m in body["messages"] if m["role"] == "tool"}
    assert json.loads(tools["c1"]) == [{"title": f"Result {i}", "url": f"https://example.org/{i}",
                                        "snippet": f"about {i}"} for i in range(6)]  # fmt: skip
    assert json.loads(tools["c2"]) == {"status": 404, "id": "acct-9", "error": "account not found"}
    excluded = json.loads(tools["c3"])
    assert excluded["status"] == "oversized" and excluded["tool"] == "run_sql" and excluded["limit_tokens"] == 2000
    assert "ROW-" not in sent.body.decode()
    assert body["messages"][:2] == messages[:2]  # everything else as the SDK sent it
    with urllib.request.urlopen(app_gateway.base + "/metrics") as m:
        metrics = m.read().decode()
    assert 'llm_gateway_tool_outputs_total{outcome="projected",reason="none",stage="upfront"} 2.0' in metrics
    assert 'llm_gateway_tool_outputs_total{outcome="excluded",reason="none",stage="upfront"} 1.0' in metrics
