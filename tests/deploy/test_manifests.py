"""deploy/ is consistent with itself and with the gateway: probes, ports, grace period,
the config inside the ConfigMap, the Secret reference, the Dockerfile's hygiene."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

from gateway.config import load_config, parse_config

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
K8S = DEPLOY / "kubernetes"


def docs(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def kind(k: str) -> dict[str, Any]:
    found = [d for p in sorted(K8S.glob("*.yaml")) for d in docs(p) if d.get("kind") == k]
    assert len(found) == 1, f"expected one {k}"
    return found[0]


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
    cfg = parse_config(kind("ConfigMap")["data"]["gateway.yaml"], env={"OPENAI_API_KEY": "sk-test"})
    assert ports["http"] == cfg.server.port and cfg.server.host == "0.0.0.0"
    assert spec["terminationGracePeriodSeconds"] > cfg.server.drain_s
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


def test_dockerfile_is_slim_non_root_and_healthchecked() -> None:
    text = (DEPLOY / "Dockerfile").read_text()
    assert re.search(r"^FROM python:3\.\d+-slim", text, re.M)
    user = re.findall(r"^USER (\S+)", text, re.M)
    assert user and user[-1] not in ("root", "0")
    assert "HEALTHCHECK" in text and "/healthz" in text
    assert not re.search(r"^COPY .*tests", text, re.M)
    ignored = (DEPLOY.parent / ".dockerignore").read_text().split()
    assert "tests" in ignored and ".git" in ignored


def test_compose_runs_gateway_prometheus_and_grafana() -> None:
    compose = docs(DEPLOY / "compose.yaml")[0]
    assert set(compose["services"]) == {"gateway", "prometheus", "grafana"}
    prom = docs(DEPLOY / "prometheus" / "prometheus.yml")[0]
    assert prom["scrape_configs"][0]["static_configs"][0]["targets"] == ["gateway:8080"]
