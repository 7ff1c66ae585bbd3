"""The gateway behind an egress proxy, as a deployer runs it: `make run` with the shipped config
and `http_proxy` in its environment (server.upstream_proxy's default, `env`), a real forward
proxy (tinyproxy) with credentials, the fake upstream named by this machine's host name, and
the stock openai SDK as the client: buffered and streamed answers arrive through the proxy,
and its password is in no log line."""

from __future__ import annotations

import socket
import sys
from collections.abc import Iterator

import openai
import pytest

from tests.procs import RunningProcess, base_env, free_port, start
from tests.tinyproxy import PASSWORD, Tinyproxy, tinyproxy

pytestmark = pytest.mark.e2e

HOST = socket.gethostname()


@pytest.fixture(scope="module")
def behind_proxy(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[RunningProcess, Tinyproxy]]:
    tmp = tmp_path_factory.mktemp("egress")
    fake_port, port = free_port(), free_port()
    # The fake listens wherever the host name leads (127.0.0.1 on Debian's /etc/hosts, a
    # container's own address); the gateway only ever sees the name, which is not loopback, so
    # its requests go to the proxy, which resolves it.
    fake = start([sys.executable, "-m", "gateway.fake", "--host", "0.0.0.0", "--port", str(fake_port)],
                 base_env(), fake_port, tmp / "fake.log", ready_path="/v1/models")  # fmt: skip
    with tinyproxy(tmp) as proxy:
        env = base_env(GATEWAY_PORT=str(port), UPSTREAM_BASE_URL=f"http://{HOST}:{fake_port}/v1",
                       http_proxy=proxy.url(), https_proxy=proxy.url())  # fmt: skip
        gw = start(["make", "--no-print-directory", "run"], env, port, tmp / "gateway.log")
        try:
            yield gw, proxy
        finally:
            gw.stop()
            fake.stop()


def test_the_openai_sdk_is_answered_through_the_proxy_buffered_and_streamed(
    behind_proxy: tuple[RunningProcess, Tinyproxy],
) -> None:
    gw, proxy = behind_proxy
    before = proxy.saw("Request (file descriptor")
    # Stock retries and timeouts; closed, or its pooled sockets are left for the collector.
    with openai.OpenAI(base_url=gw.base + "/v1", api_key="sk-client") as client:
        answer = client.chat.completions.create(model="gpt-4o-mini", messages=[{"role": "user", "content": "hi"}])
        assert answer.choices[0].message.content
        stream = client.chat.completions.create(model="gpt-4o-mini", messages=[{"role": "user", "content": "hi"}],
                                                stream=True)  # fmt: skip
        text = "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
    assert text
    assert proxy.saw("Request (file descriptor") >= before + 2  # both went through the proxy
    assert PASSWORD not in gw.logs()
