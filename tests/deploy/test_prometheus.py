"""The real thing: promtool validates the rules and config, a real Prometheus scrapes a
running gateway, and every metric the rules and dashboard use exists on /metrics."""

from __future__ import annotations

import itertools
import json
import re
import shutil
import subprocess
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.conftest import RunningGateway, free_port, launch_cli
from tests.fakeupstream import FakeUpstream, Reply

pytestmark = pytest.mark.prometheus
DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
PROMETHEUS, PROMTOOL = shutil.which("prometheus"), shutil.which("promtool")
needs_prometheus = pytest.mark.skipif(
    PROMETHEUS is None or PROMTOOL is None,
    reason="prometheus/promtool not installed: run `bash scripts/test-deps.sh` (make test does)",
)
METRIC = re.compile(r"\bllm_gateway_[a-z_]+")


def used_metrics() -> set[str]:
    text = (DEPLOY / "prometheus" / "alerts.yml").read_text()
    text += (DEPLOY / "grafana" / "dashboards" / "llm-gateway.json").read_text()
    return set(METRIC.findall(text))


@needs_prometheus
def test_promtool_checks_rules_and_config(tmp_path: Path) -> None:
    rules = subprocess.run([PROMTOOL, "check", "rules", str(DEPLOY / "prometheus" / "alerts.yml")],
                           capture_output=True, text=True)
    assert rules.returncode == 0, rules.stdout + rules.stderr
    assert "SUCCESS: 13 rules found" in rules.stdout
    config = subprocess.run([PROMTOOL, "check", "config", str(DEPLOY / "prometheus" / "prometheus.yml")],
                            capture_output=True, text=True)
    assert config.returncode == 0, config.stdout + config.stderr


@needs_prometheus
def test_the_alerts_fire_on_the_providers_errors_not_on_the_gateways_refusals_of_clients() -> None:
    # A gateway key reaching its own budget paged "upstream none is answering budget errors",
    # and wrong keys and key limits counted in the upstream error ratio: alerts_test.yml.
    tests = Path(__file__).with_name("alerts_test.yml")
    run = subprocess.run([PROMTOOL, "test", "rules", str(tests)], capture_output=True, text=True, cwd=tests.parent)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "SUCCESS" in run.stdout


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[RunningGateway, FakeUpstream]]:
    with FakeUpstream.in_thread() as fake:
        # A key with a budget, a soft limit and an end date, so that the budget and expiry
        # gauges the rules read have series.
        ends = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() + 30 * 86400))
        gw = launch_cli(fake, tmp_path_factory.mktemp("promgw"),
                        "retry: {provider_unavailable: {max_retries: 1, base_delay_s: 0.01, max_delay_s: 0.01}}\n"
                        f"keys: [{{name: ops, key: {KEY}, budget: {{usd: 1000, soft_usd: 900, period: month}}, "
                        f"expires_at: '{ends}'}}]\n")
        try:
            yield gw, fake
        finally:
            gw.stop()


KEY = "gk-ops-0123456789"


def post(base: str, payload: dict) -> int:
    req = urllib.request.Request(base + "/v1/chat/completions", data=json.dumps(payload).encode(),
                                 headers={"Content-Type": "application/json", "Authorization": f"Bearer {KEY}"},
                                 method="POST")  # fmt: skip
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            r.read()
            return r.status
    except urllib.error.HTTPError as e:
        e.read()
        return e.code


_FRESH = itertools.count()


def drive_traffic(gw: RunningGateway, fake: FakeUpstream) -> int:
    """Successes, a stream, a retried error, a budget error and a compression: every series moves."""
    sent = 0
    # A fresh conversation each time: an identical request that just failed is answered from
    # the gateway's memory (the loop breaker), which is not what this traffic is meant to show.
    def msgs() -> list[dict[str, str]]:
        return [{"role": "user", "content": f"hi #{next(_FRESH)}"}]

    for _ in range(5):
        assert post(gw.base, {"model": "gpt-4o-mini", "messages": msgs()}) == 200
        sent += 1
    assert post(gw.base, {"model": "gpt-4o-mini", "messages": msgs(), "stream": True}) == 200
    fake.script(Reply(503, "down"), Reply(503, "down"))
    assert post(gw.base, {"model": "gpt-4o-mini", "messages": msgs()}) == 503
    # A second drive within circuit_breaker.open_s of the first finds the outage noted and
    # does not retry it (docs/errors/loop-breaker.md): its unused 503 must not answer the next.
    fake.steps.clear()
    fake.script(Reply(429, {"error": {"message": "You exceeded your current quota", "type": "insufficient_quota",
                                      "code": "insufficient_quota"}}))
    assert post(gw.base, {"model": "gpt-4o-mini", "messages": msgs()}) == 402
    from tests.convo import agent_conversation
    fake.context_limit = 4000
    assert post(gw.base, {"model": "gpt-4o-mini", "messages": agent_conversation(20)}) == 200
    fake.context_limit = None
    return sent + 4


@needs_prometheus
def test_every_metric_in_rules_and_dashboard_is_exposed(gateway: tuple[RunningGateway, FakeUpstream]) -> None:
    gw, fake = gateway
    drive_traffic(gw, fake)
    with urllib.request.urlopen(gw.base + "/metrics", timeout=5) as r:
        exposed = r.read().decode()
    names = set(re.findall(r"^(llm_gateway_[a-z_]+)", exposed, re.M))
    assert used_metrics(), "rules and dashboard use contract metrics"
    missing = {m for m in used_metrics() if m not in names}
    assert not missing, missing
    for contract in ("llm_gateway_requests_total", "llm_gateway_request_duration_seconds_bucket",
                     "llm_gateway_time_to_first_byte_seconds_bucket", "llm_gateway_upstream_attempts_total",
                     "llm_gateway_retries_total", "llm_gateway_compressions_total", "llm_gateway_in_flight_requests",
                     "llm_gateway_circuit_open", "llm_gateway_tokens_total"):
        assert contract in names, contract


@needs_prometheus
def test_real_prometheus_scrapes_the_request_count(gateway: tuple[RunningGateway, FakeUpstream], tmp_path: Path) -> None:
    gw, fake = gateway
    target = gw.base.removeprefix("http://")
    with urllib.request.urlopen(gw.base + "/metrics", timeout=5) as r:
        before = sum(float(v) for v in re.findall(r"^llm_gateway_requests_total\{[^}]*\} (\S+)", r.read().decode(), re.M))
    sent = drive_traffic(gw, fake)
    port = free_port()
    config = tmp_path / "prometheus.yml"
    config.write_text(
        "global: {scrape_interval: 1s, evaluation_interval: 1s}\n"
        f"rule_files: ['{DEPLOY / 'prometheus' / 'alerts.yml'}']\n"
        f"scrape_configs: [{{job_name: llm-gateway, static_configs: [{{targets: ['{target}']}}]}}]\n"
    )
    proc = subprocess.Popen([PROMETHEUS, f"--config.file={config}", f"--storage.tsdb.path={tmp_path / 'data'}",
                             f"--web.listen-address=127.0.0.1:{port}"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        query = urllib.parse.quote("sum(llm_gateway_requests_total)")
        deadline, value = time.monotonic() + 40, None
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/v1/query?query={query}", timeout=2) as r:
                    result = json.loads(r.read())["data"]["result"]
                if result:
                    value = float(result[0]["value"][1])
                    if value >= before + sent:
                        break
            except OSError:
                pass
            time.sleep(0.5)
        assert value == before + sent
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/v1/rules", timeout=5) as r:
            groups = json.loads(r.read())["data"]["groups"]
        assert sum(len(g["rules"]) for g in groups) == 13  # the alert rules loaded for real

        def query(expr: str) -> list[float]:
            url = f"http://127.0.0.1:{port}/api/v1/query?query={urllib.parse.quote(expr)}"
            with urllib.request.urlopen(url, timeout=5) as r:
                return [float(x["value"][1]) for x in json.loads(r.read())["data"]["result"]]

        # The budget and expiry alerts' expressions, evaluated by Prometheus on what it scraped.
        [share] = query("max by (kind, name, period) (llm_gateway_budget_spent_usd)"
                        " / max by (kind, name, period) (llm_gateway_budget_usd)")
        assert 0 < share < 0.8
        [left] = query("min by (key) (llm_gateway_key_expires_at_seconds) - time()")
        assert 29 * 86400 < left <= 30 * 86400
        # LLMGatewayBudgetErrors reads the provider's budget answers (drive_traffic's quota 429).
        assert query('sum by (upstream) (llm_gateway_upstream_attempts_total{outcome="budget"})')
    finally:
        proc.terminate()
        proc.wait(10)
