"""Claude Code itself (`claude -p`) through the gateway to an upstream that speaks only the
Responses API (the fake, `apis: [responses]`, as OpenAI serves gpt-5-codex): its real requests go
Messages → chat → Responses, and the Responses stream comes back as the Messages stream it
reads, over a tool loop (its Bash tool called through a `function_call` item, the result sent
back as a `function_call_output` and answered)."""

from __future__ import annotations

import base64
import importlib.util
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.conftest import RunningGateway
from tests.e2e.test_claude_code import claude_bin, launch, run_claude, workdir  # noqa: F401 (fixtures)
from tests.fakeupstream import FakeUpstream, Seq, Stream, response_object, responses_stream

pytestmark = pytest.mark.e2e

RESPONSES_ONLY = ", apis: [responses], model_map: {'claude-*': gpt-5-codex}"


@pytest.fixture(scope="module")
def responses_gateway(fake: FakeUpstream, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningGateway]:
    gw = launch(fake, tmp_path_factory.mktemp("ccresp"), upstream_yaml=RESPONSES_ONLY)
    yield gw
    gw.stop()


def _tool_call_turn(call_id: str, command: str) -> Stream:
    """A Responses stream that reasons, then calls Bash, its arguments in pieces."""
    seq = Seq()
    args = json.dumps({"command": command, "description": "Print a marker"})
    call = {"id": "fc_e2e", "type": "function_call", "status": "completed", "call_id": call_id, "name": "Bash",
            "arguments": args}  # fmt: skip
    thought = {"id": "rs_e2e", "type": "reasoning", "summary": [{"type": "summary_text", "text": "Run it."}]}
    done = {**response_object("gpt-5-codex"), "id": "resp_e2e", "output": [thought, call]}
    shell = {**done, "status": "in_progress", "output": [], "usage": None}
    where = {"item_id": "fc_e2e", "output_index": 1}
    return Stream([
        seq("response.created", response=shell),
        seq("response.output_item.added", output_index=0, item={**thought, "summary": []}),
        seq("response.reasoning_summary_text.delta", item_id="rs_e2e", output_index=0, summary_index=0,
            delta="Run it."),
        seq("response.output_item.done", output_index=0, item=thought),
        seq("response.output_item.added", output_index=1, item={**call, "status": "in_progress", "arguments": ""}),
        *[seq("response.function_call_arguments.delta", **where, delta=args[i : i + 9]) for i in range(0, len(args), 9)],
        seq("response.function_call_arguments.done", **where, arguments=args),
        seq("response.output_item.done", output_index=1, item=call),
        seq("response.completed", response=done),
    ], then="eof")  # fmt: skip


def test_claude_code_runs_a_bash_tool_loop_on_a_responses_only_upstream(
    claude_bin: Path, responses_gateway: RunningGateway, upstream: FakeUpstream, workdir: Path  # noqa: F811
) -> None:
    def turn(payload: dict[str, Any]) -> Stream:
        last = payload["input"][-1]
        if last["type"] == "function_call_output":
            words = tuple(f"The command printed {last['output'].strip()}.".split(" "))
            return Stream(responses_stream("gpt-5-codex", (words[0], *(" " + w for w in words[1:]))), then="eof")
        return _tool_call_turn("call_e2e_1", "echo responses-marker-42")

    upstream.script(turn, turn)
    r = run_claude(claude_bin, responses_gateway, workdir, "print the marker with Bash", timeout=90)
    assert r.rc == 0, (r.out, r.err)
    assert "The command printed responses-marker-42." in r.out
    sent = [req.json() for req in upstream.responses_requests()]
    assert len(sent) == 2 and not upstream.chat_requests() and not upstream.messages_requests()
    first, second = sent
    assert first["model"] == "gpt-5-codex" and first["stream"] is True and first["store"] is False
    assert first["instructions"] and len(first["tools"]) > 5
    assert all("name" in t and t["strict"] is False for t in first["tools"])
    call, output = second["input"][-2:]
    assert (call["type"], call["call_id"], call["name"]) == ("function_call", "call_e2e_1", "Bash")
    assert output["type"] == "function_call_output" and output["call_id"] == "call_e2e_1"
    assert "responses-marker-42" in output["output"]


def test_claude_codes_pdf_read_reaches_a_responses_upstream_as_a_file(
    claude_bin: Path, responses_gateway: RunningGateway, upstream: FakeUpstream, workdir: Path  # noqa: F811
) -> None:
    """Its Read on a .pdf answers with a ``document`` block inside the tool_result: the
    Responses model gets the PDF itself (``input_file`` after the result), as OpenAI reads it,
    not a note that it was left out."""
    pdf = _pdf_capture()
    (workdir / "doc.pdf").write_bytes(pdf)

    def turn(payload: dict[str, Any]) -> Stream:
        if payload["input"][-1]["type"] != "function_call" and any(
                i.get("type") == "function_call_output" for i in payload["input"]):  # fmt: skip
            return Stream(responses_stream("gpt-5-codex", ("It", " says", " Hello", " PDF.")), then="eof")
        return _read_turn("call_e2e_pdf", str(workdir / "doc.pdf"))

    upstream.script(turn, turn)
    r = run_claude(claude_bin, responses_gateway, workdir, "summarise doc.pdf", timeout=90)
    assert r.rc == 0, (r.out, r.err)
    assert "It says Hello PDF." in r.out
    second = [req.json() for req in upstream.responses_requests()][-1]
    output = next(i for i in second["input"] if i.get("type") == "function_call_output")
    assert output["call_id"] == "call_e2e_pdf" and output["output"].endswith("[1 file(s): attached after this result]")
    files = [p for i in second["input"] if i.get("type") == "message" and isinstance(i.get("content"), list)
             for p in i["content"] if p.get("type") == "input_file"]  # fmt: skip
    assert [f["file_data"] for f in files] == ["data:application/pdf;base64," + base64.b64encode(pdf).decode()]


def _pdf_capture() -> bytes:
    """The one-page PDF the corpus capture has Claude Code read (capture_claude_code.py)."""
    spec = importlib.util.spec_from_file_location(
        "capture_claude_code", Path(__file__).resolve().parents[1] / "corpus" / "requests" / "capture_claude_code.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    made: bytes = module._pdf()
    return made


def _read_turn(call_id: str, path: str) -> Stream:
    """A Responses stream that calls Read on ``path``, its arguments whole."""
    seq = Seq()
    args = json.dumps({"file_path": path})
    call = {"id": "fc_pdf", "type": "function_call", "status": "completed", "call_id": call_id, "name": "Read",
            "arguments": args}  # fmt: skip
    done = {**response_object("gpt-5-codex"), "id": "resp_pdf", "output": [call]}
    shell = {**done, "status": "in_progress", "output": [], "usage": None}
    return Stream([
        seq("response.created", response=shell),
        seq("response.output_item.added", output_index=0, item={**call, "status": "in_progress", "arguments": ""}),
        seq("response.function_call_arguments.delta", item_id="fc_pdf", output_index=0, delta=args),
        seq("response.function_call_arguments.done", item_id="fc_pdf", output_index=0, arguments=args),
        seq("response.output_item.done", output_index=0, item=call),
        seq("response.completed", response=done),
    ], then="eof")  # fmt: skip
