"""The chart rendered by ``helm template`` for the main value combinations, and what it must refuse."""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest

from tailguard.api import DEFAULT_VLLM_IMAGE
from tailguard.cli import build_parser
from tailguard.k8s.rbac import CLUSTER_RULES, NAMESPACED_RULES, OPERATOR_RULES

from .chart_files import DASHBOARD
from .helm_tool import NAMESPACE, RELEASE, Helm, HelmError, Manifest, find, one

FULLNAME = f"{RELEASE}-tailguard"


def _deployment(manifests: list[Manifest]) -> Manifest:
    return one(manifests, "Deployment", FULLNAME)


def _container(manifests: list[Manifest]) -> Manifest:
    containers = _deployment(manifests)["spec"]["template"]["spec"]["containers"]
    assert [c["name"] for c in containers] == ["operator"]
    container: Manifest = containers[0]
    return container


def _run_args(manifests: list[Manifest]) -> Any:
    """The container's arguments as ``tailguard`` itself parses them (its entrypoint is ``tailguard``)."""
    return build_parser().parse_args(_container(manifests)["args"])


def _operator_roles(manifests: list[Manifest], kind: str) -> list[Manifest]:
    return [
        m
        for m in find(manifests, kind)
        if m["metadata"]["labels"]["app.kubernetes.io/component"] == "operator"
    ]


def _env(container: Manifest) -> dict[str, Any]:
    return {e["name"]: e for e in container.get("env") or []}


def _volumes(manifests: list[Manifest]) -> dict[str, Manifest]:
    return {v["name"]: v for v in _deployment(manifests)["spec"]["template"]["spec"]["volumes"]}


def _mounts(manifests: list[Manifest]) -> dict[str, Manifest]:
    return {m["name"]: m for m in _container(manifests)["volumeMounts"]}


# --- defaults -----------------------------------------------------------------------------------------


def test_default_install_renders_the_operator_and_its_cluster_role(helm: Helm) -> None:
    manifests = helm.template()
    kinds = sorted(m["kind"] for m in manifests)
    operator = ["ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Service", "Deployment"]
    user_roles = ["ClusterRole", "ClusterRole"]  # InferenceService permissions for admin/edit/view
    helm_test = ["ServiceAccount", "Role", "RoleBinding", "Pod"]
    assert kinds == sorted(operator + user_roles + helm_test)
    (role,) = _operator_roles(manifests, "ClusterRole")
    assert role["rules"] == OPERATOR_RULES
    binding = one(manifests, "ClusterRoleBinding")
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "ClusterRole",
        "name": role["metadata"]["name"],
    }
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": FULLNAME, "namespace": NAMESPACE}]
    assert one(manifests, "ServiceAccount", FULLNAME)["metadata"]["namespace"] == NAMESPACE


def test_exactly_one_operator_and_never_two_at_once(helm: Helm) -> None:
    spec = _deployment(helm.template())["spec"]
    assert spec["replicas"] == 1
    assert spec["strategy"] == {"type": "Recreate"}


def test_operator_runs_locked_down(helm: Helm) -> None:
    manifests = helm.template()
    pod = _deployment(manifests)["spec"]["template"]["spec"]
    container = _container(manifests)
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] > 0
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    sc = container["securityContext"]
    assert sc["readOnlyRootFilesystem"] is True
    assert sc["allowPrivilegeEscalation"] is False
    assert sc["capabilities"] == {"drop": ["ALL"]}
    assert set(container["resources"]) == {"requests", "limits"}
    assert {"cpu", "memory"} <= set(container["resources"]["requests"])
    assert "memory" in container["resources"]["limits"]
    # A read-only root needs a writable scratch directory.
    assert _mounts(manifests)["tmp"]["mountPath"] == "/tmp"


def test_probes_use_kopf_healthz_on_the_liveness_port(helm: Helm) -> None:
    manifests = helm.template()
    container = _container(manifests)
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports == {"healthz": 8080, "metrics": 9090}
    for probe in ("livenessProbe", "readinessProbe"):
        assert container[probe]["httpGet"] == {"path": "/healthz", "port": "healthz"}
    args = _run_args(manifests)
    assert (args.liveness_port, args.metrics_port) == (8080, 9090)


def test_default_args_watch_every_namespace_and_reach_prometheus(helm: Helm) -> None:
    manifests = helm.template()
    args = _run_args(manifests)
    assert args.command == "run"
    assert args.all_namespaces is True
    assert args.prometheus_url == "http://prometheus-operated.monitoring.svc:9090"
    assert args.prometheus_timeout == 10
    assert args.rate_window == "2m"
    assert args.burst_window == "30s"
    assert args.prometheus_token_file is None
    assert args.prometheus_username is None
    assert args.prometheus_ca_file is None
    # Only the pod's name, the operator's identity (UID 65532 has no passwd entry to name it).
    assert _env(_container(manifests)) == {
        "POD_NAME": {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}
    }


def test_image_defaults_to_the_app_version_and_a_digest_pins_it(helm: Helm) -> None:
    assert _container(helm.template())["image"] == "ghcr.io/tailguard/operator:0.1.0"
    digest = "sha256:" + "ab" * 32
    pinned = helm.template({"image": {"repository": "registry.example/tg", "tag": "0.1.0", "digest": digest}})
    assert _container(pinned)["image"] == f"registry.example/tg@{digest}"


MIRROR = "registry.example/mirror/vllm-openai"


def test_default_vllm_image_is_the_operators_built_in_unless_the_values_set_one(
    helm: Helm, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("TAILGUARD_DEFAULT_VLLM_IMAGE", raising=False)
    manifests = helm.template()
    assert not [a for a in _container(manifests)["args"] if a.startswith("--default-vllm-image")]
    assert _run_args(manifests).default_vllm_image == DEFAULT_VLLM_IMAGE

    tagged = helm.template({"vllm": {"image": {"repository": MIRROR, "tag": "v0.33.0"}}})
    assert _run_args(tagged).default_vllm_image == f"{MIRROR}:v0.33.0"
    digest = "sha256:" + "cd" * 32
    pinned = helm.template({"vllm": {"image": {"repository": MIRROR, "tag": "v0.33.0", "digest": digest}}})
    assert _run_args(pinned).default_vllm_image == f"{MIRROR}@{digest}"
    assert _container(pinned)["image"] == "ghcr.io/tailguard/operator:0.1.0", (
        "the operator's own image is apart"
    )


def test_metrics_service_selects_the_operator_pod(helm: Helm) -> None:
    manifests = helm.template()
    service = one(manifests, "Service")
    pod_labels = _deployment(manifests)["spec"]["template"]["metadata"]["labels"]
    assert service["spec"]["selector"].items() <= pod_labels.items()
    assert service["spec"]["ports"] == [
        {"name": "metrics", "port": 9090, "targetPort": "metrics", "protocol": "TCP"}
    ]
    selector = _deployment(manifests)["spec"]["selector"]["matchLabels"]
    assert selector.items() <= pod_labels.items()


def test_optional_objects_are_off_by_default(helm: Helm) -> None:
    kinds = {m["kind"] for m in helm.template()}
    assert "ServiceMonitor" not in kinds
    assert "ConfigMap" not in kinds
    assert "Secret" not in kinds


# --- RBAC ---------------------------------------------------------------------------------------------


def test_namespaced_scope_grants_a_role_per_namespace_and_only_discovery_cluster_wide(helm: Helm) -> None:
    manifests = helm.template({"rbac": {"scope": "Namespaces", "namespaces": ["team-b", "team-a"]}})
    roles = _operator_roles(manifests, "Role")
    assert sorted(r["metadata"]["namespace"] for r in roles) == ["team-a", "team-b"]
    for role in roles:
        assert role["rules"] == NAMESPACED_RULES
    bindings = _operator_roles(manifests, "RoleBinding")
    assert sorted(b["metadata"]["namespace"] for b in bindings) == ["team-a", "team-b"]
    for binding in bindings:
        assert binding["roleRef"]["kind"] == "Role"
        assert binding["subjects"] == [{"kind": "ServiceAccount", "name": FULLNAME, "namespace": NAMESPACE}]
    (cluster_role,) = _operator_roles(manifests, "ClusterRole")
    assert cluster_role["rules"] == CLUSTER_RULES
    (cluster_binding,) = _operator_roles(manifests, "ClusterRoleBinding")
    assert cluster_binding["roleRef"]["name"] == cluster_role["metadata"]["name"]

    args = _run_args(manifests)
    assert args.all_namespaces is False
    assert sorted(args.namespaces) == ["team-a", "team-b"]


def test_operator_rbac_never_reads_secrets_or_uses_wildcards(helm: Helm) -> None:
    for values in ({}, {"rbac": {"scope": "Namespaces", "namespaces": ["team-a"]}}):
        manifests = helm.template(values)
        for kind in ("ClusterRole", "Role"):
            for role in _operator_roles(manifests, kind):
                for rule in role["rules"]:
                    assert "secrets" not in rule["resources"], role["metadata"]["name"]
                    assert "*" not in rule["resources"] + rule["verbs"] + rule["apiGroups"]


def test_user_roles_aggregate_into_admin_edit_view(helm: Helm) -> None:
    user_roles = [
        m
        for m in find(helm.template(), "ClusterRole")
        if m["metadata"]["labels"]["app.kubernetes.io/component"] == "user-roles"
    ]
    aggregated = {
        key.rsplit("-", 1)[-1]
        for role in user_roles
        for key, value in role["metadata"]["labels"].items()
        if key.startswith("rbac.authorization.k8s.io/aggregate-to-") and value == "true"
    }
    assert aggregated == {"admin", "edit", "view"}
    assert not find(
        helm.template({"rbac": {"aggregateToDefaultRoles": False}}), "ClusterRole", f"{FULLNAME}-view"
    )


def test_rbac_create_false_renders_no_roles(helm: Helm) -> None:
    manifests = helm.template({"rbac": {"create": False}})
    for kind in ("ClusterRole", "ClusterRoleBinding"):
        assert not find(manifests, kind)
    assert not _operator_roles(manifests, "Role")


def test_an_existing_service_account_is_used_not_created(helm: Helm) -> None:
    manifests = helm.template({"serviceAccount": {"create": False, "name": "platform-tailguard"}})
    assert not find(manifests, "ServiceAccount", FULLNAME)
    assert _deployment(manifests)["spec"]["template"]["spec"]["serviceAccountName"] == "platform-tailguard"
    assert one(manifests, "ClusterRoleBinding")["subjects"][0]["name"] == "platform-tailguard"


# --- Prometheus access --------------------------------------------------------------------------------


def test_bearer_token_from_values_goes_into_a_secret_mounted_as_a_file(helm: Helm) -> None:
    manifests = helm.template({"prometheus": {"auth": {"type": "bearerToken", "bearerToken": "s3cret"}}})
    secret = one(manifests, "Secret")
    assert base64.b64decode(secret["data"]["token"]).decode() == "s3cret"
    volume = _volumes(manifests)["prometheus-token"]
    assert volume["secret"] == {
        "secretName": secret["metadata"]["name"],
        "items": [{"key": "token", "path": "token"}],
    }
    mount = _mounts(manifests)["prometheus-token"]
    assert _run_args(manifests).prometheus_token_file == f"{mount['mountPath']}/token"
    # A new token restarts the operator, which reads the file at start.
    annotations = _deployment(manifests)["spec"]["template"]["metadata"]["annotations"]
    assert "checksum/prometheus-secret" in annotations


def test_bearer_token_from_an_existing_secret(helm: Helm) -> None:
    manifests = helm.template(
        {
            "prometheus": {
                "auth": {"type": "bearerToken", "existingSecret": "prom-creds", "tokenKey": "api-token"}
            }
        }
    )
    assert not find(manifests, "Secret")
    assert _volumes(manifests)["prometheus-token"]["secret"] == {
        "secretName": "prom-creds",
        "items": [{"key": "api-token", "path": "token"}],
    }


def test_basic_auth_passes_the_user_as_a_flag_and_the_password_as_env(helm: Helm) -> None:
    manifests = helm.template(
        {
            "prometheus": {
                "auth": {"type": "basicAuth", "username": "tailguard", "existingSecret": "prom-creds"}
            }
        }
    )
    assert _run_args(manifests).prometheus_username == "tailguard"
    password = _env(_container(manifests))["TAILGUARD_PROMETHEUS_PASSWORD"]
    assert password["valueFrom"] == {"secretKeyRef": {"name": "prom-creds", "key": "password"}}
    assert "prometheus-token" not in _volumes(manifests)


def test_prometheus_ca_from_values_or_an_existing_secret(helm: Helm) -> None:
    pem = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"
    inline = helm.template(
        {"prometheus": {"url": "https://prometheus.example:9091", "tls": {"caBundle": pem}}}
    )
    config_map = one(inline, "ConfigMap")
    assert config_map["data"]["ca.crt"].strip() == pem.strip()
    assert _volumes(inline)["prometheus-ca"]["configMap"]["name"] == config_map["metadata"]["name"]
    args = _run_args(inline)
    assert args.prometheus_ca_file == f"{_mounts(inline)['prometheus-ca']['mountPath']}/ca.crt"
    assert args.prometheus_url == "https://prometheus.example:9091"

    existing = helm.template({"prometheus": {"tls": {"existingSecret": "prom-ca", "caKey": "bundle.pem"}}})
    assert _volumes(existing)["prometheus-ca"]["secret"] == {
        "secretName": "prom-ca",
        "items": [{"key": "bundle.pem", "path": "ca.crt"}],
    }


# --- optional objects ---------------------------------------------------------------------------------


def test_service_monitor_scrapes_the_metrics_service(helm: Helm) -> None:
    manifests = helm.template(
        {"serviceMonitor": {"enabled": True, "labels": {"release": "kube-prometheus-stack"}}}
    )
    monitor = one(manifests, "ServiceMonitor")
    service = one(manifests, "Service")
    assert monitor["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    assert monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    assert monitor["spec"]["namespaceSelector"] == {"matchNames": [NAMESPACE]}
    assert [e["port"] for e in monitor["spec"]["endpoints"]] == ["metrics"]


def test_metrics_disabled_drops_the_port_and_the_service(helm: Helm) -> None:
    manifests = helm.template({"metrics": {"enabled": False}})
    assert not find(manifests, "Service")
    assert [p["name"] for p in _container(manifests)["ports"]] == ["healthz"]
    assert _run_args(manifests).metrics_port == 0


def test_dashboard_config_map_carries_the_docs_dashboard_for_the_sidecar(helm: Helm) -> None:
    manifests = helm.template(
        {"dashboard": {"enabled": True, "annotations": {"grafana_folder": "LLM serving"}}}
    )
    config_map = one(manifests, "ConfigMap")
    assert config_map["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert config_map["metadata"]["annotations"] == {"grafana_folder": "LLM serving"}
    assert json.loads(config_map["data"]["tailguard.json"]) == json.loads(DASHBOARD.read_text())


def test_helm_test_pod_waits_for_the_operator_with_read_only_access(helm: Helm) -> None:
    manifests = helm.template()
    pod = one(manifests, "Pod")
    assert pod["metadata"]["annotations"]["helm.sh/hook"] == "test"
    assert pod["spec"]["restartPolicy"] == "Never"
    assert FULLNAME in pod["spec"]["containers"][0]["args"][0]
    compile(pod["spec"]["containers"][0]["args"][0], "helm-test", "exec")  # the script is valid Python
    (role,) = [
        r for r in find(manifests, "Role") if r["metadata"]["labels"]["app.kubernetes.io/component"] == "test"
    ]
    assert role["rules"] == [
        {"apiGroups": ["apps"], "resources": ["deployments"], "resourceNames": [FULLNAME], "verbs": ["get"]}
    ]


def test_every_name_fits_in_63_characters(helm: Helm) -> None:
    long_release = "a-release-name-as-long-as-helm-allows-fifty-three-chr"  # 53 characters
    assert len(long_release) == 53
    manifests = helm.template(
        {"rbac": {"scope": "Namespaces", "namespaces": ["team-a"]}, "dashboard": {"enabled": True}},
        release=long_release,
    )
    names = [m["metadata"]["name"] for m in manifests]
    assert all(len(n) <= 63 and not n.endswith("-") for n in names), names
    # Objects of one kind keep distinct names after truncation.
    by_kind: dict[tuple[str, str], int] = {}
    for m in manifests:
        key = (m["kind"], m["metadata"].get("namespace", "") + "/" + m["metadata"]["name"])
        by_kind[key] = by_kind.get(key, 0) + 1
    assert all(count == 1 for count in by_kind.values()), by_kind


def test_fullname_override(helm: Helm) -> None:
    manifests = helm.template({"fullnameOverride": "tailguard"})
    assert one(manifests, "Deployment")["metadata"]["name"] == "tailguard"


# --- refusals -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("values", "expected"),
    [
        pytest.param(
            {"replicaCount": 2}, "'replicaCount' not allowed", id="operator-replicas-are-not-a-value"
        ),
        pytest.param({"image": {"tag": "latest"}}, "image.tag", id="image-tag-latest"),
        pytest.param(
            {"image": {"repository": "Registry/Op"}}, "image.repository", id="image-repository-uppercase"
        ),
        pytest.param({"image": {"digest": "sha256:short"}}, "image.digest", id="image-digest-malformed"),
        pytest.param({"image": {"pullPolicy": "always"}}, "image.pullPolicy", id="image-pull-policy-case"),
        pytest.param(
            {"vllm": {"image": {"repository": MIRROR, "tag": "latest"}}},
            "vllm.image.tag",
            id="vllm-image-tag-latest",
        ),
        pytest.param(
            {"vllm": {"image": {"repository": "Mirror/vLLM", "tag": "v1"}}},
            "vllm.image.repository",
            id="vllm-image-repository-uppercase",
        ),
        pytest.param(
            {"vllm": {"image": {"repository": f"{MIRROR}:v1", "tag": "v1"}}},
            "vllm.image.repository",
            id="vllm-image-repository-with-tag",
        ),
        pytest.param(
            {"vllm": {"image": {"repository": MIRROR, "digest": "sha256:short"}}},
            "vllm.image.digest",
            id="vllm-image-digest-malformed",
        ),
        pytest.param({"vllm": {"image": "vllm/vllm-openai:v1"}}, "vllm.image", id="vllm-image-a-string"),
        pytest.param({"rbac": {"scope": "cluster"}}, "rbac.scope", id="rbac-scope-unknown"),
        pytest.param({"rbac": {"scope": "Namespaces"}}, "rbac.namespaces", id="rbac-namespaces-missing"),
        pytest.param(
            {"rbac": {"namespaces": ["team-a"]}}, "rbac.namespaces", id="rbac-namespaces-with-cluster-scope"
        ),
        pytest.param(
            {"rbac": {"scope": "Namespaces", "namespaces": ["Team_A"]}},
            "rbac.namespaces.0",
            id="rbac-namespace-invalid",
        ),
        pytest.param(
            {"prometheus": {"url": "prometheus:9090"}}, "prometheus.url", id="prometheus-url-without-scheme"
        ),
        pytest.param(
            {"prometheus": {"url": "http://prom:9090/?x=1"}}, "prometheus.url", id="prometheus-url-with-query"
        ),
        pytest.param(
            {"prometheus": {"auth": {"type": "token"}}}, "prometheus.auth.type", id="prometheus-auth-unknown"
        ),
        pytest.param(
            {"prometheus": {"rateWindow": "2 minutes"}},
            "prometheus.rateWindow",
            id="rate-window-not-a-duration",
        ),
        pytest.param(
            {"resources": {"requests": {"cpu": "100m", "memory": None}}},
            "resources.requests",
            id="resources-request-memory-missing",
        ),
        pytest.param(
            {"resources": {"limits": {"cpu": "1", "memory": None}}},
            "resources.limits",
            id="resources-limit-memory-missing",
        ),
        pytest.param(
            {"resources": {"requests": {"cpu": "lots", "memory": "1Gi"}}},
            "resources.requests.cpu",
            id="resources-cpu-malformed",
        ),
        pytest.param({"operator": {"logLevel": "trace"}}, "operator.logLevel", id="log-level-unknown"),
    ],
)
def test_schema_refuses_costly_mistakes(helm: Helm, values: dict[str, Any], expected: str) -> None:
    # helm names the field as a JSON pointer (/image/tag) or, before 3.18, dotted (image.tag).
    with pytest.raises(HelmError, match=expected.replace(".", "[./]")):
        helm.template(values)


@pytest.mark.parametrize(
    ("values", "expected"),
    [
        pytest.param(
            {"prometheus": {"auth": {"type": "bearerToken"}}},
            "prometheus.auth.bearerToken",
            id="bearer-without-token",
        ),
        pytest.param(
            {"prometheus": {"auth": {"type": "basicAuth", "password": "x"}}},
            "prometheus.auth.username",
            id="basic-without-user",
        ),
        pytest.param(
            {"prometheus": {"auth": {"type": "basicAuth", "username": "u"}}},
            "prometheus.auth.password",
            id="basic-without-password",
        ),
        pytest.param(
            {"prometheus": {"tls": {"caBundle": "-----BEGIN CERTIFICATE-----\nx\n", "existingSecret": "ca"}}},
            "not both",
            id="two-ca-sources",
        ),
        pytest.param(
            {"metrics": {"enabled": False}, "serviceMonitor": {"enabled": True}},
            "metrics.enabled",
            id="monitor-without-metrics",
        ),
        pytest.param(
            {"vllm": {"image": {"repository": MIRROR}}},
            "vllm.image.repository needs vllm.image.tag or vllm.image.digest",
            id="vllm-repository-without-version",
        ),
        pytest.param(
            {"vllm": {"image": {"tag": "v0.33.0"}}},
            "need vllm.image.repository",
            id="vllm-tag-without-repository",
        ),
    ],
)
def test_templates_refuse_settings_that_cannot_work(
    helm: Helm, values: dict[str, Any], expected: str
) -> None:
    with pytest.raises(HelmError, match=expected):
        helm.template(values)


# --- lint ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "values",
    [
        pytest.param({}, id="defaults"),
        pytest.param({"rbac": {"scope": "Namespaces", "namespaces": ["team-a", "team-b"]}}, id="namespaced"),
        pytest.param(
            {
                "serviceMonitor": {"enabled": True},
                "dashboard": {"enabled": True},
                "prometheus": {"auth": {"type": "basicAuth", "username": "u", "password": "p"}},
                "vllm": {"image": {"repository": MIRROR, "tag": "v0.33.0"}},
            },
            id="everything-on",
        ),
    ],
)
def test_helm_lint_strict(helm: Helm, values: dict[str, Any]) -> None:
    out = helm.lint(values)
    assert "0 chart(s) failed" in out


def test_notes_say_how_to_build_the_image_while_the_default_is_unpublished(helm: Helm) -> None:
    notes = helm.notes()
    assert "ImagePullBackOff" in notes
    assert "make image-push" in notes
    mirrored = helm.notes("--set", "image.repository=registry.example.com/platform/tailguard")
    assert "ImagePullBackOff" not in mirrored
