"""``llm-gateway classify``: body in (file or stdin), class, evidence, retryable and wait out."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path

from gateway.__main__ import main

REPO = Path(__file__).resolve().parents[2]


def run(argv: list[str], stdin: str = "") -> tuple[int, str]:
    out = io.StringIO()
    from gateway import classify_cli

    code = classify_cli.main(argv, stdin=io.StringIO(stdin), stdout=out)
    return code, out.getvalue()


def test_a_body_file_with_status_and_headers(tmp_path: Path) -> None:
    body = tmp_path / "err.json"
    body.write_text(json.dumps({"error": {"type": "usage_limit_reached", "message": "The usage limit has been reached",
                                          "resets_in_seconds": 602705}}))  # fmt: skip
    code, out = run(["--status", "429", "-H", "retry-after: 602705", str(body)])
    assert code == 0
    assert out.splitlines()[:3] == ["class:     budget", "evidence:  code:usage_limit_reached", "retryable: no"]
    assert out.splitlines()[3].startswith("wait:      602705s (until ")


def test_stdin_and_json_output() -> None:
    code, out = run(["--status", "429", "--json"], stdin='{"error": {"message": "Rate limit", "code": "rate_limit_exceeded"}}')
    doc = json.loads(out)
    assert code == 0
    assert doc == {"type": "rate_limit", "evidence": "wording:throttled", "retryable": True,
                   "retry_after_s": None, "reset_at": None, "provider_code": "rate_limit_exceeded"}  # fmt: skip


def test_a_stream_is_read_by_its_api_reader() -> None:
    stream = 'event: error\ndata: {"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}\n\n'
    code, out = run(["--stream", "--api", "messages", "--json"], stdin=stream)
    assert code == 0 and json.loads(out)["evidence"] == "stream code:overloaded_error"
    code, _ = run(["--stream", "--api", "messages"], stdin="event: ping\ndata: {}\n\n")
    assert code == 1  # no error event in it


def test_request_size_is_optional_evidence() -> None:
    argv = ["--status", "413", "--request-tokens", "40000", "--context-window", "32768", "--json"]
    _, out = run(argv, stdin='{"error": {"message": "Request Entity Too Large"}}')
    assert json.loads(out)["type"] == "context_overflow"


def test_the_host_is_optional_evidence() -> None:
    body = '{"status":429,"error":"INSUFFICIENT QUOTA","message":"You exceeded your current limit of concurrent requests."}'
    _, out = run(["--status", "429", "--host", "api.scaleway.ai", "--json"], stdin=body)
    assert json.loads(out)["type"] == "rate_limit"


def test_wired_as_a_subcommand_of_the_console_script() -> None:
    # The real entry point, as an operator runs it; `--config PATH` keeps starting the server.
    proc = subprocess.run(
        [sys.executable, "-m", "gateway", "classify", "--status", "529", "--json"],
        input=b'{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}',
        capture_output=True, cwd=REPO, check=True,
    )  # fmt: skip
    assert json.loads(proc.stdout)["type"] == "provider_unavailable"
    assert main(["--config", str(REPO / "no-such-file.yaml")]) == 2  # the server path is unchanged


def test_runs_as_a_module_too() -> None:
    # `python -m gateway.classify_cli --help` printed nothing: the module had no __main__ guard.
    proc = subprocess.run([sys.executable, "-m", "gateway.classify_cli", "--help"],
                          capture_output=True, cwd=REPO, check=True)  # fmt: skip
    assert b"usage: llm-gateway classify" in proc.stdout
