"""Gemini CLI itself (``gemini -p``, headless) on an upstream that speaks only the Responses API
(``apis: [responses]``, as OpenAI serves gpt-5-codex), through Gemini → chat → Responses: a
function-call loop with a real tool (``list_directory``) whose result goes back as a
``function_call_output`` with the call's id. Set up as tests/e2e/test_gemini_cli.py is."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from gateway.fake.tool_call import _responses_call
from tests.e2e.conftest import RunningGateway, launch_cli
from tests.e2e.test_gemini_cli import gemini, run_gemini  # noqa: F401 (fixture)
from tests.fakeupstream import FakeUpstream, Stream, responses_stream

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def responses_gateway(fake: FakeUpstream, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningGateway]:
    gw = launch_cli(fake, tmp_path_factory.mktemp("geminiresp"), "",
                    upstream_yaml=", apis: [responses], model_map: {'gemini-*': gpt-5-codex}")  # fmt: skip
    yield gw
    gw.stop()


def test_gemini_cli_runs_a_function_call_loop_on_a_responses_only_upstream(
    gemini: Path, responses_gateway: RunningGateway, upstream: FakeUpstream, tmp_path: Path  # noqa: F811
) -> None:
    work = tmp_path / "work"
    upstream.script(_responses_call("gpt-5-codex", "ls1", "list_directory", json.dumps({"dir_path": str(work)}), True),
                    Stream(responses_stream("gpt-5-codex", ("There", " is", " notes.txt.")), then="eof"))  # fmt: skip
    done = run_gemini(gemini, responses_gateway, tmp_path, "List the files here, then say what you found")
    assert done.returncode == 0, done.stderr[-3000:]
    assert "There is notes.txt." in done.stdout
    assert all(r.path == "/v1/responses" for r in upstream.requests), [r.path for r in upstream.requests]
    first, second = (r.json() for r in upstream.requests)
    assert first["model"] == "gpt-5-codex" and first["store"] is False and first["instructions"]
    assert {t["name"] for t in first["tools"]} >= {"list_directory", "read_file"}
    call, output = second["input"][-2:]
    assert (call["type"], call["call_id"], call["name"]) == ("function_call", "call_ls1", "list_directory")
    assert output["type"] == "function_call_output" and output["call_id"] == "call_ls1"
    assert "notes.txt" in output["output"]
