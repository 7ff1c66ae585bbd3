"""The gateway serving HTTPS itself (server.tls_cert_file / tls_key_file), as an operator runs
it with no TLS-terminating proxy in front: the stock openai SDK and curl over TLS, the health
check, a renewed certificate served after SIGHUP without a restart (connections open before
keep theirs), workers on TLS sockets, and a certificate that cannot be served refused at
start-up in one line."""

from __future__ import annotations

import http.client
import os
import signal
import socket
import ssl
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import openai
import pytest
import trustme

from tests.fakeupstream import FakeUpstream
from tests.procs import ROOT, RunningProcess, base_env, free_port, start

pytestmark = pytest.mark.e2e


def _files(ca: trustme.CA, tmp: Path, name: str = "server",
           key_type: trustme.KeyType = trustme.KeyType.ECDSA) -> tuple[Path, Path]:  # fmt: skip
    leaf = ca.issue_cert("localhost", "127.0.0.1", key_type=key_type)
    cert, key = tmp / f"{name}.crt", tmp / f"{name}.key"
    leaf.cert_chain_pems[0].write_to_path(str(cert))
    for pem in leaf.cert_chain_pems[1:]:
        pem.write_to_path(str(cert), append=True)
    leaf.private_key_pem.write_to_path(str(key))
    return cert, key


def _launch(fake: FakeUpstream, tmp: Path, cert: Path, key: Path, workers: int = 1, more: str = "") -> RunningProcess:
    port = free_port()
    config = tmp / "gateway.yaml"
    config.write_text(f"server: {{port: {port}, drain_s: 3, workers: {workers}, tls_cert_file: '{cert}', "
                      f"tls_key_file: '{key}'{more}}}\nupstreams: [{{name: primary, base_url: '{fake.url}'}}]\n")  # fmt: skip
    env = base_env(LLM_GATEWAY_ADDRESS_FILE=str(tmp / "address"))
    return start([sys.executable, "-m", "gateway", "--config", str(config)], env, port, tmp / "gateway.log",
                 scheme="https")  # fmt: skip


def _get(conn: http.client.HTTPSConnection, path: str) -> int:
    conn.request("GET", path)
    response = conn.getresponse()
    response.read()
    return response.status


def _eventually(check: Callable[[], bool], timeout_s: float = 10.0) -> bool:
    end = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() > end:
            return False
        time.sleep(0.05)
    return True


def _trusting(ca: trustme.CA) -> ssl.SSLContext:
    context = ssl.create_default_context()
    ca.configure_trust(context)
    return context


def _served_by(port: int, ca: trustme.CA) -> bool:
    """Whether a new handshake with the gateway presents a certificate ``ca`` signed."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=5) as raw:
            with _trusting(ca).wrap_socket(raw, server_hostname="localhost"):
                return True
    except ssl.SSLCertVerificationError:
        return False


def test_the_stock_sdk_curl_and_the_health_check_speak_tls_and_a_renewed_certificate_needs_no_restart(
    upstream: FakeUpstream, tmp_path: Path
) -> None:
    ca = trustme.CA()
    cert, key = _files(ca, tmp_path)
    gw = _launch(upstream, tmp_path, cert, key)
    try:
        port = int(gw.base.rsplit(":", 1)[1])
        client = openai.OpenAI(base_url=gw.base.replace("127.0.0.1", "localhost") + "/v1", api_key="sk-client",
                               http_client=openai.DefaultHttpxClient(verify=_trusting(ca)))  # fmt: skip
        with client:
            answer = client.chat.completions.create(model="gpt-4o-mini", messages=[{"role": "user", "content": "hi"}])
        assert answer.choices[0].message.content
        bundle = tmp_path / "ca.pem"
        ca.cert_pem.write_to_path(str(bundle))
        curl = subprocess.run(["curl", "-sS", "--cacert", str(bundle), "-o", "/dev/null", "-w", "%{http_code}",
                               f"https://localhost:{port}/healthz"], capture_output=True, text=True, timeout=30)  # fmt: skip
        assert curl.stdout == "200", curl.stderr
        plain = subprocess.run(["curl", "-sS", "-o", "/dev/null", "-w", "%{http_code}", f"http://127.0.0.1:{port}/healthz"],
                               capture_output=True, text=True, timeout=30)  # fmt: skip
        assert plain.stdout != "200"  # plain HTTP on a TLS port is not served
        check = subprocess.run([sys.executable, "-m", "gateway.healthcheck"], cwd=ROOT, capture_output=True, text=True,
                               env=base_env(LLM_GATEWAY_ADDRESS_FILE=str(tmp_path / "address")), timeout=30)  # fmt: skip
        assert check.returncode == 0, check.stderr
        assert '"https://127.0.0.1:' in (tmp_path / "address").read_text()

        # Renewed by another CA into the same paths (as certbot or cert-manager would), then SIGHUP.
        keep = http.client.HTTPSConnection("localhost", port, context=_trusting(ca), timeout=10)
        assert _get(keep, "/healthz") == 200  # a connection made before
        # Of another key type, too: loaded beside the first in one context, the ECDSA one went on
        # being served to every client that prefers it (audit).
        renewed = trustme.CA()
        new_cert, new_key = _files(renewed, tmp_path, "renewed", trustme.KeyType.RSA)
        os.replace(new_cert, cert)
        os.replace(new_key, key)
        assert _served_by(port, ca)  # not re-read yet: no reload asked, and the check runs every 30 s
        os.kill(gw.proc.pid, signal.SIGHUP)
        assert _eventually(lambda: _served_by(port, renewed))
        assert not _served_by(port, ca)
        assert _get(keep, "/healthz") == 200  # kept its handshake: the same connection
        keep.close()
        # Written by the log thread after the swap, so possibly after the handshakes above.
        assert '"event":"tls_certificate_reloaded"' in gw.logs_when(lambda t: "tls_certificate_reloaded" in t)
        assert gw.stop() == 0
    finally:
        gw.stop()


def test_workers_serve_tls_on_their_shared_sockets(upstream: FakeUpstream, tmp_path: Path) -> None:
    ca = trustme.CA()
    cert, key = _files(ca, tmp_path)
    gw = _launch(upstream, tmp_path, cert, key, workers=2)
    try:
        client = openai.OpenAI(base_url=gw.base.replace("127.0.0.1", "localhost") + "/v1", api_key="sk-client",
                               http_client=openai.DefaultHttpxClient(verify=_trusting(ca)))  # fmt: skip
        with client:
            for _ in range(6):
                client.chat.completions.create(model="gpt-4o-mini", messages=[{"role": "user", "content": "hi"}])
        assert '"https://127.0.0.1:' in (tmp_path / "address").read_text()
    finally:
        assert gw.stop() == 0


def test_with_tls_every_scrape_counts_every_worker(upstream: FakeUpstream, tmp_path: Path) -> None:
    """The workers' private metrics sockets exist on TLS too: without them each scrape showed
    the one worker it reached, with llm_gateway_workers_reporting 1 of 2."""
    ca = trustme.CA()
    cert, key = _files(ca, tmp_path)
    gw = _launch(upstream, tmp_path, cert, key, workers=2)
    try:
        port = int(gw.base.rsplit(":", 1)[1])
        body = b'{"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "hi"}]}'

        def fresh() -> http.client.HTTPSConnection:  # a connection of its own: either worker may take it
            return http.client.HTTPSConnection("localhost", port, context=_trusting(ca), timeout=10)

        for _ in range(20):
            conn = fresh()
            conn.request("POST", "/v1/chat/completions", body, {"content-type": "application/json"})
            assert conn.getresponse().status == 200
            conn.close()
        for _ in range(4):
            conn = fresh()
            conn.request("GET", "/metrics")
            text = conn.getresponse().read().decode()
            conn.close()
            served = sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
                         if line.startswith("llm_gateway_requests_total{"))  # fmt: skip
            assert served == 20
            assert "llm_gateway_workers_reporting 2.0" in text
    finally:
        assert gw.stop() == 0


@pytest.mark.parametrize("workers", [1, 2])
def test_a_handshake_that_does_not_come_is_cut_at_header_timeout_s(
    upstream: FakeUpstream, tmp_path: Path, workers: int
) -> None:
    """A client that opens a connection and sends no ClientHello (or half of one) held it for
    the loop's 60 s: now server.header_timeout_s, as for a plain connection's head."""
    cert, key = _files(trustme.CA(), tmp_path)
    gw = _launch(upstream, tmp_path, cert, key, workers, more=", header_timeout_s: 1")
    try:
        port = int(gw.base.rsplit(":", 1)[1])
        for sent in (b"", b"\x16\x03\x01\x00\xc8\x01"):  # nothing; a ClientHello's first bytes
            with socket.create_connection(("127.0.0.1", port), timeout=30) as raw:
                raw.sendall(sent)
                started = time.monotonic()
                try:
                    assert raw.recv(1024) == b""
                except ConnectionResetError:
                    pass
                assert time.monotonic() - started < 5
    finally:
        gw.stop()


def test_a_key_that_is_not_the_certificates_is_refused_at_start_up_in_one_line(tmp_path: Path) -> None:
    ca = trustme.CA()
    cert, _ = _files(ca, tmp_path)
    _, other_key = _files(ca, tmp_path, "other")
    config = tmp_path / "gateway.yaml"
    config.write_text(f"server: {{tls_cert_file: '{cert}', tls_key_file: '{other_key}'}}\n"
                      "upstreams: [{name: a, base_url: 'http://127.0.0.1:9/v1'}]\n")  # fmt: skip
    done = subprocess.run([sys.executable, "-m", "gateway", "--config", str(config)], cwd=ROOT, env=base_env(),
                          capture_output=True, text=True, timeout=60)  # fmt: skip
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "server: tls_cert_file: the certificate and key cannot be loaded together" in lines[0] and "KEY_VALUES_MISMATCH" in lines[0], done.stderr
    assert "PRIVATE KEY" not in done.stderr
