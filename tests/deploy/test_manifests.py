"""deploy/ is consistent with itself and with the gateway: probes, ports, grace period,
the config inside the ConfigMap, the Secret reference, the Dockerfile's hygiene, and the
Redis that replicas share their state through (compose and Kubernetes)."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml

from gateway.config import ConfigError, expand_env, load_config, parse_config

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
K8S = DEPLOY / "kubernetes"


def docs(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def kind(k: str, name: str = "llm-gateway") -> dict[str, Any]:
    found = [d for p in sorted(K8S.glob("*.yaml")) for d in docs(p)
             if d.get("kind") == k and d["metadata"]["name"] == name]  # fmt: skip
    assert len(found) == 1, f"expected one {k} named {name}"
    return found[0]


def secret_env() -> dict[str, str]:
    """What the example Secret puts into the gateway pods' environment."""
    return {k: str(v) for k, v in docs(K8S / "secret.example.yaml")[0]["stringData"].items()}


def selects(selector: dict[str, str], labels: dict[str, str]) -> bool:
    return selector.items() <= labels.items()


def test_every_yaml_under_deploy_parses() -> None:
    files = sorted(DEPLOY.rglob("*.yaml")) + sorted(DEPLOY.rglob("*.yml"))
    assert len(files) >= 10
    for path in files:
        assert docs(path), path


def test_kustomization_lists_the_manifests() -> None:
    listed = docs(K8S / "kustomization.yaml")[0]["resources"]
    for name in listed:
        assert (K8S / name).exists()
    assert {kind(k)["kind"] for k in ("Deployment", "Service", "ConfigMap", "PodDisruptionBudget")}


def test_deployment_probes_ports_replicas_and_grace() -> None:
    dep = kind("Deployment")
    spec = dep["spec"]["template"]["spec"]
    container = spec["containers"][0]
    assert dep["spec"]["replicas"] >= 2
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert container["readinessProbe"]["httpGet"]["port"] in ports
    cfg = parse_config(kind("ConfigMap")["data"]["gateway.yaml"], env=secret_env())
    assert ports["http"] == cfg.server.port and cfg.server.host == "0.0.0.0"
    # The grace period runs from preStop's start: its sleep and then the whole drain fit in it.
    [sleep, pause] = container["lifecycle"]["preStop"]["exec"]["command"]
    assert sleep == "sleep" and 0 < int(pause) < 30
    assert spec["terminationGracePeriodSeconds"] > int(pause) + cfg.server.drain_s
    assert container["resources"]["requests"] and container["resources"]["limits"]
    assert spec["securityContext"]["runAsNonRoot"] is True
    mount = container["volumeMounts"][0]["mountPath"]
    assert container["args"] == ["--config", f"{mount}/gateway.yaml"]


def test_service_and_pdb_select_the_deployment() -> None:
    labels = kind("Deployment")["spec"]["template"]["metadata"]["labels"]
    svc, pdb = kind("Service"), kind("PodDisruptionBudget")
    assert svc["spec"]["selector"].items() <= labels.items()
    assert pdb["spec"]["selector"]["matchLabels"].items() <= labels.items()
    assert svc["spec"]["ports"][0]["targetPort"] == "http"


def test_secret_is_referenced_not_inlined() -> None:
    dep = kind("Deployment")
    refs = [e["secretRef"]["name"] for e in dep["spec"]["template"]["spec"]["containers"][0]["envFrom"]]
    example = docs(K8S / "secret.example.yaml")[0]
    assert refs == [example["metadata"]["name"]]
    assert "secret.example.yaml" not in docs(K8S / "kustomization.yaml")[0]["resources"]
    assert "${OPENAI_API_KEY}" in kind("ConfigMap")["data"]["gateway.yaml"]


def test_container_config_validates_with_an_empty_environment() -> None:
    cfg = load_config(DEPLOY / "gateway.container.yaml", env={})
    assert cfg.server.host == "0.0.0.0" and cfg.upstreams[0].api_key is None
    assert cfg.state.backend == "memory" and cfg.loop_breaker.secret is None  # one container: no Redis needed


def test_dockerfile_is_slim_non_root_and_healthchecked() -> None:
    text = (DEPLOY / "Dockerfile").read_text()
    assert re.search(r"^FROM python:3\.\d+-slim", text, re.M)
    user = re.findall(r"^USER (\S+)", text, re.M)
    assert user and user[-1] not in ("root", "0")
    assert "HEALTHCHECK" in text and "gateway.healthcheck" in text  # reads the port from the config
    assert not re.search(r"^COPY .*tests", text, re.M)
    ignored = (DEPLOY.parent / ".dockerignore").read_text().split()
    assert "tests" in ignored and ".git" in ignored


def test_compose_runs_gateway_redis_prometheus_and_grafana() -> None:
    compose = docs(DEPLOY / "compose.yaml")[0]
    assert set(compose["services"]) == {"gateway", "redis", "prometheus", "grafana"}
    prom = docs(DEPLOY / "prometheus" / "prometheus.yml")[0]
    assert prom["scrape_configs"][0]["static_configs"][0]["targets"] == ["gateway:8080"]


def test_configmap_shares_state_through_redis_with_one_loop_breaker_secret() -> None:
    text = kind("ConfigMap")["data"]["gateway.yaml"]
    env = secret_env()
    cfg = parse_config(text, env=env)
    assert cfg.state.backend == "redis" and cfg.state.url == env["REDIS_URL"]
    assert cfg.loop_breaker.enabled and cfg.loop_breaker.secret == env["LOOP_BREAKER_SECRET"]
    # Every variable the config needs without a default is a key of the Secret the pods load.
    needed = set(re.findall(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}", text))
    assert {"OPENAI_API_KEY", "REDIS_URL", "LOOP_BREAKER_SECRET"} <= needed <= set(env)
    # A pod without the shared secret refuses to start rather than draw a key of its own
    # (its loop breaker would then not recognise the other replicas' answers).
    for missing in ("LOOP_BREAKER_SECRET", "REDIS_URL"):
        with pytest.raises(ConfigError, match=missing):
            parse_config(text, env={k: v for k, v in env.items() if k != missing})


def test_redis_service_is_where_the_secrets_redis_url_points() -> None:
    dep, svc = kind("Deployment", "llm-gateway-redis"), kind("Service", "llm-gateway-redis")
    url = urlsplit(secret_env()["REDIS_URL"])
    port = svc["spec"]["ports"][0]
    assert url.scheme == "redis" and (url.hostname, url.port) == (svc["metadata"]["name"], port["port"])
    pod = dep["spec"]["template"]
    assert selects(svc["spec"]["selector"], pod["metadata"]["labels"])
    assert selects(dep["spec"]["selector"]["matchLabels"], pod["metadata"]["labels"])
    container = pod["spec"]["containers"][0]
    assert port["targetPort"] in {p["name"] for p in container["ports"]}
    assert "redis.yaml" in docs(K8S / "kustomization.yaml")[0]["resources"]


def test_gateway_and_redis_pods_are_never_confused() -> None:
    gateway_pod = kind("Deployment")["spec"]["template"]["metadata"]["labels"]
    redis_pod = kind("Deployment", "llm-gateway-redis")["spec"]["template"]["metadata"]["labels"]
    for name, own, other in (("llm-gateway", gateway_pod, redis_pod), ("llm-gateway-redis", redis_pod, gateway_pod)):
        selector = kind("Service", name)["spec"]["selector"]
        assert selects(selector, own) and not selects(selector, other)
    assert not selects(kind("PodDisruptionBudget")["spec"]["selector"]["matchLabels"], redis_pod)
    policy = kind("NetworkPolicy", "llm-gateway-redis")["spec"]
    assert selects(policy["podSelector"]["matchLabels"], redis_pod)
    (rule,) = policy["ingress"]
    assert [selects(f["podSelector"]["matchLabels"], gateway_pod) for f in rule["from"]] == [True]


def test_redis_keeps_the_keys_spend_through_a_restart_and_runs_locked_down() -> None:
    """Keys' spend lives in Redis for a budget's period: without persistence a Redis restart
    started every budget over, and allkeys-lru evicted idle keys' spend first (measured)."""
    spec = kind("Deployment", "llm-gateway-redis")["spec"]["template"]["spec"]
    (container,) = spec["containers"]
    args = container["args"]
    assert args[args.index("--appendonly") + 1] == "yes" and args[args.index("--maxmemory-policy") + 1] == "volatile-ttl"
    mount = next(m for m in container["volumeMounts"] if m["mountPath"] == "/data")
    volume = next(v for v in spec["volumes"] if v["name"] == mount["name"])
    claim = kind("PersistentVolumeClaim", volume["persistentVolumeClaim"]["claimName"])
    assert claim["spec"]["accessModes"] == ["ReadWriteOnce"] and spec["securityContext"]["fsGroup"] == 999
    assert "--maxmemory" in args and container["resources"]["limits"]["memory"]
    assert spec["securityContext"]["runAsNonRoot"] is True
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert container["readinessProbe"] and container["livenessProbe"]


def test_compose_gateway_shares_state_through_the_redis_service() -> None:
    services = docs(DEPLOY / "compose.yaml")[0]["services"]
    gateway, redis = services["gateway"], services["redis"]
    # The environment compose gives the gateway (its own ${VAR:-default} resolved with nothing set).
    env = {k: expand_env(str(v), {}) for k, v in gateway["environment"].items()}
    cfg = load_config(DEPLOY / "gateway.container.yaml", env=env)
    assert cfg.state.backend == "redis"
    url = urlsplit(cfg.state.url or "")
    assert url.hostname == "redis" and url.port == 6379
    assert "redis" in gateway["depends_on"] and "LOOP_BREAKER_SECRET" in gateway["environment"]
    # Passwordless Redis stays on compose's own network; the keys' spend survives a restart.
    assert "ports" not in redis and redis["image"].startswith("redis:")
    command = redis["command"]
    assert command[command.index("--appendonly") + 1] == "yes" and "redis-data:/data" in redis["volumes"]
    assert command[command.index("--maxmemory-policy") + 1] == "volatile-ttl"


@pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl not installed: `kubectl kustomize` not checked")
def test_kustomize_builds_the_gateway_and_its_redis() -> None:
    built = subprocess.run(["kubectl", "kustomize", str(K8S)], capture_output=True, text=True, timeout=60,
                           check=False)  # fmt: skip
    assert built.returncode == 0, built.stderr
    names = {(d["kind"], d["metadata"]["name"]) for d in yaml.safe_load_all(built.stdout) if d}
    assert names == {("ConfigMap", "llm-gateway"), ("Deployment", "llm-gateway"), ("Service", "llm-gateway"),
                     ("PodDisruptionBudget", "llm-gateway"), ("Deployment", "llm-gateway-redis"),
                     ("Service", "llm-gateway-redis"), ("NetworkPolicy", "llm-gateway-redis"),
                     ("PersistentVolumeClaim", "llm-gateway-redis-data")}  # fmt: skip


def test_compose_publishes_every_port_on_loopback_only() -> None:
    """Prometheus's series name keys, teams and spend, and Grafana lets anonymous viewers in:
    published as ``9090:9090`` they were open to the network while the gateway was not (audit)."""
    compose = docs(DEPLOY / "compose.yaml")[0]
    published = {name: service.get("ports", []) for name, service in compose["services"].items()}
    assert published["prometheus"] and published["grafana"] and published["gateway"]
    assert all(str(p).startswith("127.0.0.1:") for ports in published.values() for p in ports)
