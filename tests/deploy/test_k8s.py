"""deploy/k8s: every manifest parses, and the pieces point at each other."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from controller.config import ENV_BOOTSTRAP_TOKEN, ENV_DB, ENV_REDIS
from tests.deploy.support import DEPLOY, cli_context, load_yaml_all, read_env_file

K8S = DEPLOY / "k8s"
MANIFESTS = sorted(K8S.glob("*.yaml"))


@pytest.fixture(scope="module")
def objects() -> dict[str, dict[str, Any]]:
    """kind → the one object of that kind (the manifests hold one of each)."""
    found: dict[str, dict[str, Any]] = {}
    for path in MANIFESTS:
        for doc in load_yaml_all(path):
            assert doc["kind"] not in found, f"two {doc['kind']} objects"
            found[doc["kind"]] = doc
    return found


@pytest.fixture(scope="module")
def container(objects: dict[str, dict[str, Any]]) -> dict[str, Any]:
    (only,) = objects["Deployment"]["spec"]["template"]["spec"]["containers"]
    return only


@pytest.mark.parametrize("path", MANIFESTS, ids=lambda p: p.name)
def test_each_manifest_is_well_formed(path: Path) -> None:
    docs = load_yaml_all(path)
    assert docs
    for doc in docs:
        assert isinstance(doc, dict)
        assert doc.get("apiVersion") and doc.get("kind")
        if doc["kind"] != "Kustomization":
            assert doc["metadata"]["name"]


def test_every_kind_is_there(objects: dict[str, dict[str, Any]]) -> None:
    assert {
        "Namespace", "Deployment", "Service", "Ingress", "Secret",
        "HorizontalPodAutoscaler", "PodDisruptionBudget", "Kustomization",
    } <= set(objects)
    assert objects["Ingress"]["apiVersion"] == "networking.k8s.io/v1"
    assert objects["HorizontalPodAutoscaler"]["apiVersion"] == "autoscaling/v2"
    assert objects["PodDisruptionBudget"]["apiVersion"] == "policy/v1"


def test_kustomization_lists_the_manifests_but_not_the_secret_template(
    objects: dict[str, dict[str, Any]],
) -> None:
    resources = objects["Kustomization"]["resources"]
    for name in resources:
        assert (K8S / name).is_file(), name
    assert "secret.example.yaml" not in resources
    assert {p.name for p in MANIFESTS} - set(resources) == {
        "kustomization.yaml", "secret.example.yaml"
    }
    assert objects["Kustomization"]["namespace"] == objects["Namespace"]["metadata"]["name"]


def test_probes_hit_healthz_on_the_served_port(container: dict[str, Any]) -> None:
    ctx = cli_context(container["args"])
    assert ctx.info_name == "controller" and ctx.params["host"] == "0.0.0.0"
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    for probe in ("readinessProbe", "livenessProbe", "startupProbe"):
        get = container[probe]["httpGet"]
        assert get["path"] == "/healthz", probe
        assert ports[get["port"]] == ctx.params["port"], probe
    # /healthz also fails while the database is down: liveness must be slower than readiness.
    ready, live = container["readinessProbe"], container["livenessProbe"]
    assert (
        live["periodSeconds"] * live["failureThreshold"]
        > ready["periodSeconds"] * ready["failureThreshold"]
    )


def test_pods_run_unprivileged(objects: dict[str, dict[str, Any]], container: dict[str, Any]) -> None:
    pod = objects["Deployment"]["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] == 10001  # the images' USER
    assert pod["automountServiceAccountToken"] is False
    sc = container["securityContext"]
    assert sc["allowPrivilegeEscalation"] is False
    assert sc["readOnlyRootFilesystem"] is True
    assert sc["capabilities"]["drop"] == ["ALL"]
    assert "cpu" in container["resources"]["requests"], "the HPA scales on CPU requests"


def test_secret_holds_the_controller_environment_and_no_value(
    objects: dict[str, dict[str, Any]], container: dict[str, Any]
) -> None:
    secret = objects["Secret"]
    assert set(secret["stringData"]) == {ENV_DB, ENV_REDIS, ENV_BOOTSTRAP_TOKEN}
    assert all(v == "" for v in secret["stringData"].values()), "a secret is committed"
    assert "data" not in secret
    refs = [e["secretRef"]["name"] for e in container["envFrom"]]
    assert refs == [secret["metadata"]["name"]]
    # Same keys as the example env file.
    example = read_env_file(DEPLOY / "examples" / "controller.env")
    assert {k for k in example if k.startswith("DROIDWIRE_")} == set(secret["stringData"])
    assert "secret.yaml" in (DEPLOY / ".gitignore").read_text(encoding="utf-8")


def labels_match(selector: dict[str, str], labels: dict[str, str]) -> bool:
    return bool(selector) and all(labels.get(k) == v for k, v in selector.items())


def test_selectors_and_ports_line_up(objects: dict[str, dict[str, Any]]) -> None:
    deployment = objects["Deployment"]
    pod_labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert labels_match(deployment["spec"]["selector"]["matchLabels"], pod_labels)
    service = objects["Service"]
    assert labels_match(service["spec"]["selector"], pod_labels)
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    port_names = {p["name"] for p in container["ports"]}
    (service_port,) = service["spec"]["ports"]
    assert service_port["targetPort"] in port_names
    assert labels_match(objects["PodDisruptionBudget"]["spec"]["selector"]["matchLabels"], pod_labels)

    (rule,) = objects["Ingress"]["spec"]["rules"]
    (path,) = rule["http"]["paths"]
    backend = path["backend"]["service"]
    assert backend["name"] == service["metadata"]["name"]
    assert backend["port"]["name"] == service_port["name"]
    assert path["path"] == "/" and path["pathType"] == "Prefix"  # /v1/bridge, /mcp, /healthz …

    target = objects["HorizontalPodAutoscaler"]["spec"]["scaleTargetRef"]
    assert (target["kind"], target["name"]) == ("Deployment", deployment["metadata"]["name"])


def test_ingress_keeps_websockets_open(objects: dict[str, dict[str, Any]]) -> None:
    ingress = objects["Ingress"]
    notes = ingress["metadata"]["annotations"]
    for key in ("proxy-read-timeout", "proxy-send-timeout"):
        value = notes[f"nginx.ingress.kubernetes.io/{key}"]
        assert isinstance(value, str), "annotation values must be strings"
        assert int(value) >= 3600, key
    assert ingress["spec"]["ingressClassName"] == "nginx"
    assert ingress["spec"]["tls"], "bridges dial wss:// only"
    (rule,) = ingress["spec"]["rules"]
    assert rule["host"] in ingress["spec"]["tls"][0]["hosts"]


def test_replicas_survive_one_at_a_time(objects: dict[str, dict[str, Any]]) -> None:
    hpa = objects["HorizontalPodAutoscaler"]["spec"]
    assert 2 <= hpa["minReplicas"] < hpa["maxReplicas"]
    assert objects["Deployment"]["spec"]["replicas"] >= hpa["minReplicas"]
    assert objects["PodDisruptionBudget"]["spec"]["maxUnavailable"] == 1
    assert hpa["behavior"]["scaleDown"]["stabilizationWindowSeconds"] >= 300
