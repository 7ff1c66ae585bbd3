"""Claude Code itself (headless) through the gateway with a per-tool rule: a Read whose
result is far above the tool's limit reaches the model as the structured "oversized"
result (Anthropic ``tool_result`` with ``is_error``), the model narrows its call (Read with
a line range), that smaller result passes whole and the run ends normally. The scripted
model only narrows when it sees the structured result, so the run itself shows the loop
works; /metrics counts the exclusions."""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.conftest import RunningGateway
from tests.e2e.test_claude_code import claude_bin, launch, run_claude, tool_use_turn, workdir
from tests.fakeupstream import FakeUpstream

pytestmark = pytest.mark.e2e
__all__ = ["claude_bin", "workdir"]  # fixtures, used by name

RULES = """tool_outputs:
  upfront: true
  rules:
    - {tool: Read, oversized: exclude, max_tokens: 3000}
"""
LINES = 800  # ~40 KB, ~11k tokens: far above the Read rule's 3,000


@pytest.fixture(scope="module")
def rules_gateway(fake: FakeUpstream, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningGateway]:
    gw = launch(fake, tmp_path_factory.mktemp("ccrules"), RULES)
    yield gw
    gw.stop()


def tool_results(payload: dict[str, Any]) -> list[dict[str, Any]]:
    return [b for m in payload["messages"] if m["role"] == "user" and isinstance(m["content"], list)
            for b in m["content"] if b.get("type") == "tool_result"]  # fmt: skip


def text_of(block: dict[str, Any]) -> str:
    content = block["content"]
    return content if isinstance(content, str) else "".join(p.get("text", "") for p in content)


@dataclass
class NarrowingModel:
    """Reads the whole file first; narrows to 20 lines only after an oversized result."""

    path: Path
    seen: list[str] = field(default_factory=list)  # what each request's last tool result was

    def __call__(self, payload: dict[str, Any]) -> Any:
        results = tool_results(payload)
        if not results:
            self.seen.append("none")
            return tool_use_turn(1, "Read", {"file_path": str(self.path)})
        last = results[-1]
        try:
            status = json.loads(text_of(last)).get("status")
        except (ValueError, AttributeError):
            status = None
        if status == "oversized":
            self.seen.append("oversized")
            return tool_use_turn(2, "Read", {"file_path": str(self.path), "offset": 1, "limit": 20})
        self.seen.append("narrow")
        return None  # the fake's normal streamed answer: "Hello from fake."


def test_an_oversized_read_becomes_the_structured_result_and_the_narrower_read_succeeds(
    claude_bin, rules_gateway, upstream: FakeUpstream, workdir
) -> None:
    big = workdir / "big_module.py"
    big.write_text("".join(f"value_{n} = compute({n})  # line {n} of the big module\n" for n in range(LINES)))
    model = NarrowingModel(big)
    upstream.script(*[model] * 10)
    r = run_claude(claude_bin, rules_gateway, workdir, prompt="Read big_module.py and summarise it.")
    assert r.rc == 0 and "Hello from fake." in r.out, (r.rc, r.out, r.err)
    assert model.seen == ["none", "oversized", "narrow"], model.seen
    reqs = [q.json() for q in upstream.messages_requests()]
    assert len(reqs) == 3
    # The request after the big Read: its result is the structured one, an error to the model.
    [result] = tool_results(reqs[1])
    structured = json.loads(text_of(result))
    assert result["is_error"] is True and result["tool_use_id"] == "toolu_01"
    assert structured["status"] == "oversized" and structured["tool"] == "Read"
    assert structured["limit_tokens"] == 3000 and structured["original_tokens"] > 9000
    # The narrower Read passed whole (Claude Code numbers its lines), the big one stays excluded.
    first, narrow = tool_results(reqs[2])
    assert json.loads(text_of(first))["status"] == "oversized"
    assert "line 19 of the big module" in text_of(narrow) and not narrow.get("is_error")
    for q in reqs:  # no byte past the narrow range ever reached the upstream
        assert "line 500 of the big module" not in json.dumps(q)
    with urllib.request.urlopen(rules_gateway.base + "/metrics") as m:
        metrics = m.read().decode()
    # Claude Code resends the big result with its history: excluded again on the third request.
    assert 'llm_gateway_tool_outputs_total{outcome="excluded",reason="none",stage="upfront"} 2.0' in metrics
