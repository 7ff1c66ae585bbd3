"""curl, as a person at a terminal would use it, plus the process lifecycle."""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
import threading
import time
import urllib.request

import pytest

from tests.fakeupstream import FakeUpstream, Reply, Stream, chunk

pytestmark = pytest.mark.e2e
CURL = shutil.which("curl")
needs_curl = pytest.mark.skipif(CURL is None, reason="curl is not installed (scripts/test-deps.sh installs it)")


def curl(*args: str, data: bytes | None = None) -> tuple[int, dict[str, str], bytes]:
    out = subprocess.run([CURL, "-sS", "-i", "--max-time", "20", *args], input=data, capture_output=True, check=True).stdout
    head, _, body = out.partition(b"\r\n\r\n")
    lines = head.decode().split("\r\n")
    headers = {k.lower(): v.strip() for k, _, v in (ln.partition(":") for ln in lines[1:])}
    return int(lines[0].split()[1]), headers, body


@needs_curl
def test_curl_success_and_stream(readme_gateway, upstream: FakeUpstream) -> None:
    body = json.dumps({"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "hi"}]}).encode()
    status, headers, out = curl("-H", "Content-Type: application/json", "--data-binary", "@-",
                                readme_gateway.base + "/v1/chat/completions", data=body)
    assert status == 200 and json.loads(out)["choices"][0]["message"]["content"]
    assert headers["x-llm-attempts"] == "1"
    stream_body = json.dumps({"model": "gpt-4o-mini", "stream": True, "messages": [{"role": "user", "content": "hi"}]}).encode()
    status, headers, out = curl("-N", "-H", "Content-Type: application/json", "--data-binary", "@-",
                                readme_gateway.base + "/v1/chat/completions", data=stream_body)
    assert status == 200 and out.rstrip().endswith(b"data: [DONE]")


@needs_curl
@pytest.mark.parametrize(
    ("payload", "status", "code"),
    [(b"{oops", 400, "invalid_json"), (b'{"model":"m","messages":"x"}', 400, "invalid_messages"),
     (b"[]", 400, "invalid_body"), (b"x" * (33 * 1024 * 1024), 413, "request_too_large")],
    ids=["invalid-json", "messages-not-list", "not-object", "huge"],
)
def test_curl_bad_input(readme_gateway, upstream: FakeUpstream, payload: bytes, status: int, code: str) -> None:
    got, headers, out = curl("-H", "Content-Type: application/json", "--data-binary", "@-",
                             readme_gateway.base + "/v1/chat/completions", data=payload)
    assert got == status and json.loads(out)["error"]["code"] == code
    assert headers["x-llm-error-type"] == "unknown" and headers["x-should-retry"] == "false"
    assert upstream.chat_requests() == []
    assert curl(readme_gateway.base + "/healthz")[0] == 200


@needs_curl
def test_curl_metrics_and_path_traversal(readme_gateway, upstream: FakeUpstream) -> None:
    status, _, out = curl("--path-as-is", readme_gateway.base + "/v1/../../etc/passwd")
    assert status in (400, 404) and upstream.requests == []
    status, headers, out = curl(readme_gateway.base + "/metrics")
    assert status == 200 and b"llm_gateway_requests_total" in out and b"llm_gateway_in_flight_requests" in out


def test_invalid_config_exits_with_one_line(tmp_path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("server: {port: eighty}\nupstreams: [{name: a, base_url: 'http://127.0.0.1:1/v1'}]\n")
    for cfg in (bad, tmp_path / "missing.yaml"):
        r = subprocess.run([sys.executable, "-m", "gateway", "--config", str(cfg)], capture_output=True, text=True, timeout=60)
        assert r.returncode != 0
        assert len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.stderr
    r = subprocess.run([sys.executable, "-m", "gateway", "--config", str(bad)], capture_output=True, text=True, timeout=60)
    assert "server.port" in r.stderr


def test_sigterm_drains_in_flight_streams_then_exits_0(fake: FakeUpstream, upstream: FakeUpstream, tmp_path) -> None:
    from tests.e2e.conftest import launch_cli

    gw = launch_cli(fake, tmp_path)
    upstream.script(Stream([chunk({"content": f"w{i}"}) for i in range(8)] + [chunk({}, "stop")], delay_s=0.25))
    result: dict[str, object] = {}

    def read_stream() -> None:
        req = urllib.request.Request(gw.base + "/v1/chat/completions", method="POST",
                                     data=json.dumps({"model": "m", "stream": True, "messages": [{"role": "user", "content": "hi"}]}).encode(),
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=20) as r:
            result["body"] = r.read()

    t = threading.Thread(target=read_stream)
    t.start()
    time.sleep(0.5)  # the stream is in flight
    gw.proc.send_signal(signal.SIGTERM)
    time.sleep(0.2)
    try:
        urllib.request.urlopen(gw.base + "/readyz", timeout=2)
        raise AssertionError("readyz should be 503 while draining")
    except urllib.error.HTTPError as e:
        assert e.code == 503
    with urllib.request.urlopen(urllib.request.Request(
            gw.base + "/v1/chat/completions", method="POST", headers={"Content-Type": "application/json"},
            data=b'{"model":"m","messages":[{"role":"user","content":"still served?"}]}'), timeout=10) as r:
        assert r.status == 200  # new requests are still served while draining
    t.join(20)
    assert result["body"].rstrip().endswith(b"data: [DONE]")  # the stream finished
    assert gw.proc.wait(20) == 0


def test_streams_still_running_when_drain_runs_out_end_with_a_typed_error(fake: FakeUpstream, upstream: FakeUpstream,
                                                                          tmp_path) -> None:
    from tests.e2e.conftest import launch_cli

    gw = launch_cli(fake, tmp_path)  # drain_s: 5; a stream of 40 x 0.25 s outlives it
    upstream.script(Stream([chunk({"content": f"w{i}"}) for i in range(40)] + [chunk({}, "stop")], delay_s=0.25))
    result: dict[str, bytes] = {}

    def read_stream() -> None:
        req = urllib.request.Request(gw.base + "/v1/chat/completions", method="POST",
                                     data=json.dumps({"model": "m", "stream": True, "messages": [{"role": "user", "content": "long"}]}).encode(),
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=30) as r:
            result["body"] = r.read()

    t = threading.Thread(target=read_stream)
    t.start()
    time.sleep(0.6)
    gw.proc.send_signal(signal.SIGTERM)
    t.join(30)
    assert gw.proc.wait(20) == 0
    events = [line[6:] for line in result["body"].decode().split("\n") if line.startswith("data: ")]
    assert "[DONE]" not in events
    last = json.loads(events[-1])
    assert last["choices"][0]["finish_reason"] == "error"
    assert last["error"]["code"] == "gateway_shutdown" and last["error"]["retryable"] is True
    log = [json.loads(line) for line in gw.log_path.read_text().splitlines() if line.startswith("{")]
    [cut] = [r for r in log if r.get("event") == "request" and r.get("ended_by")]
    assert cut["ended_by"] == "shutdown" and cut["status"] == 200 and cut["error_type"] == "gateway_shutdown"


@needs_curl
def test_a_request_still_waiting_when_drain_runs_out_gets_a_typed_503_and_the_process_exits_at_once(
        fake: FakeUpstream, upstream: FakeUpstream, tmp_path) -> None:  # fmt: skip
    from tests.e2e.conftest import launch_cli

    gw = launch_cli(fake, tmp_path)  # drain_s: 5
    # The upstream asks for 20 s before a retry: the request is in its backoff when drain_s runs out.
    upstream.script(Reply(503, {"error": {"message": "overloaded", "type": "server_error"}},
                          headers={"retry-after": "20"}))
    result: dict[str, tuple[int, dict[str, str], bytes]] = {}

    def ask() -> None:
        result["answer"] = curl(gw.base + "/v1/chat/completions", "-H", "Content-Type: application/json",
                                "--data-binary", "@-", data=b'{"model":"m","messages":[{"role":"user","content":"hi"}]}')

    t = threading.Thread(target=ask)
    t.start()
    deadline = time.monotonic() + 10
    while not upstream.requests and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(0.2)  # its answer read: the retry's wait has begun
    signalled = time.monotonic()
    gw.proc.send_signal(signal.SIGTERM)
    assert gw.proc.wait(20) == 0
    took = time.monotonic() - signalled
    assert 5 <= took < 6.5, took  # drain_s, then out: not seconds of closing connections after it
    t.join(5)
    status, headers, body = result["answer"]  # an answer, not "Empty reply from server"
    assert status == 503
    assert json.loads(body)["error"]["code"] == "gateway_shutdown"
    assert headers["x-llm-error-retryable"] == "true" and headers["retry-after"] == "1"
    log = [json.loads(line) for line in gw.log_path.read_text().splitlines() if line.startswith("{")]
    [cut] = [r for r in log if r.get("event") == "request"]
    assert cut["status"] == 503 and cut["ended_by"] == "shutdown" and cut["error_type"] == "gateway_shutdown"
