"""The Helm chart `deploy/helm/jobmedic`, rendered without helm and checked as Kubernetes would read it.

No `helm` binary is in our registries: `helm_render` renders the chart's templates (real
Helm templates, kept to a subset of Go templates) with Jinja2 and Helm's semantics for
that subset. Each test renders the chart with its own values or a variation (SSH mode,
external database, bundled MySQL, Temporal TLS and API key, munged sidecar, several
clusters), parses every manifest and checks its structure: names, labels and selectors,
containers and probes, every mount backed by a volume, every variable from a Secret, and
the ConfigMap's TOML loaded by jobmedic's own `load_settings` with the environment the
Deployment gives the worker.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from sqlalchemy.engine import make_url

from tests.deploy.helm_render import RenderError, manifests, render_chart, value_paths
from workers.settings import Settings, load_settings
from workflows.contracts import Mode

CHART = Path(__file__).resolve().parents[2] / "deploy" / "helm" / "jobmedic"
DNS_1123 = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
SSH = {"slurm": {"access": "ssh", "ssh": {"host": "login1.example.org", "existingSecret": "jm-ssh"}}}
# placeholder values for the variables the Deployment takes from Secrets
SECRET_VALUES = {"JOBMEDIC_AUDIT__URL": "mysql+pymysql://jobmedic:pw@db:3306/jobmedic", "JOBMEDIC_TEMPORAL__API_KEY": "k"}


def render(overrides: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    docs = manifests(render_chart(CHART, overrides))
    for doc in docs:
        check_manifest(doc)
    return docs


def one(docs: list[dict[str, Any]], kind: str, name_suffix: str = "") -> dict[str, Any]:
    found = [d for d in docs if d["kind"] == kind and d["metadata"]["name"].endswith(name_suffix)]
    assert len(found) == 1, f"{len(found)} {kind} named *{name_suffix}"
    return found[0]


def kinds(docs: list[dict[str, Any]]) -> list[str]:
    return sorted(d["kind"] for d in docs)


def worker(docs: list[dict[str, Any]]) -> dict[str, Any]:
    pod = one(docs, "Deployment")["spec"]["template"]["spec"]
    (container,) = [c for c in pod["containers"] if c["name"] == "worker"]
    return container


def env_of(container: dict[str, Any]) -> dict[str, Any]:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container.get("env", [])}


def check_manifest(doc: dict[str, Any]) -> None:
    assert isinstance(doc.get("apiVersion"), str) and isinstance(doc.get("kind"), str), doc
    name = doc["metadata"]["name"]
    assert DNS_1123.fullmatch(name) and len(name) <= 63, f"{doc['kind']} name {name!r}"
    assert doc["metadata"]["labels"]["app.kubernetes.io/instance"] == "jm"
    if doc["kind"] in {"Deployment", "StatefulSet"}:
        check_workload(doc)


def check_workload(doc: dict[str, Any]) -> None:
    spec = doc["spec"]
    template_labels = spec["template"]["metadata"]["labels"]
    assert spec["selector"]["matchLabels"].items() <= template_labels.items(), "selector does not match the pods"
    pod = spec["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    volumes = {v["name"]: v for v in pod.get("volumes", [])}
    for claim in spec.get("volumeClaimTemplates", []):
        volumes[claim["metadata"]["name"]] = claim
    assert len(volumes) == len(pod.get("volumes", [])) + len(spec.get("volumeClaimTemplates", [])), "duplicate volumes"
    for c in pod["containers"]:
        assert c["image"] and ":" in c["image"], c["name"]
        assert "resources" in c and "requests" in c["resources"], c["name"]
        for mount in c.get("volumeMounts", []):
            assert mount["name"] in volumes, f"{c['name']} mounts {mount['name']}, which is no volume"
            assert mount["mountPath"].startswith("/")
        for e in c.get("env", []):
            assert ("value" in e) != ("valueFrom" in e), e
            if "valueFrom" in e:
                ref = e["valueFrom"]["secretKeyRef"]
                assert ref["name"] and ref["key"], e
        ports = {p["name"] for p in c.get("ports", [])}
        for probe in ("readinessProbe", "livenessProbe"):
            if probe in c and "httpGet" in c[probe]:
                assert c[probe]["httpGet"]["port"] in ports


def settings_of(docs: list[dict[str, Any]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Settings:
    """The ConfigMap's jobmedic.toml, loaded the way the worker loads it in the pod."""
    for name in list(__import__("os").environ):
        if name.startswith("JOBMEDIC_"):
            monkeypatch.delenv(name)
    env = env_of(worker(docs))
    config = one(docs, "ConfigMap")["data"]["jobmedic.toml"]
    path = tmp_path / "jobmedic.toml"
    path.write_text(config)
    assert env["JOBMEDIC_CONFIG"].endswith("/jobmedic.toml")
    for name, value in env.items():
        if name.startswith("JOBMEDIC_") and name != "JOBMEDIC_CONFIG":
            monkeypatch.setenv(name, value if isinstance(value, str) else SECRET_VALUES[name])
    return load_settings(path)


def mounted_file(docs: list[dict[str, Any]], path: Path) -> tuple[str, dict[str, Any]]:
    """(volume name, volume) of the worker's mount that holds `path`, with `path`'s file name as an item."""
    pod = one(docs, "Deployment")["spec"]["template"]["spec"]
    volumes = {v["name"]: v for v in pod["volumes"]}
    for mount in worker(docs)["volumeMounts"]:
        if path.parent == Path(mount["mountPath"]):
            volume = volumes[mount["name"]]
            items = volume.get("secret", {}).get("items", [])
            assert path.name in {i["path"] for i in items}, f"{path} is not an item of volume {mount['name']}"
            return mount["name"], volume
    raise AssertionError(f"no mount holds {path}")


# ----------------------------------------------------------------------------------- the chart itself


def test_chart_metadata() -> None:
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    assert chart["apiVersion"] == "v2" and chart["name"] == "jobmedic" and chart["type"] == "application"
    pyproject = (CHART.parents[2] / "pyproject.toml").read_text()
    assert f'version = "{chart["appVersion"]}"' in pyproject, "appVersion follows the package version"


def test_every_value_a_template_reads_is_in_values_yaml() -> None:
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    for path in sorted(value_paths(CHART)):
        node: Any = values
        for part in path.split("."):
            assert isinstance(node, dict) and part in node, f".Values.{path} is read but not in values.yaml"
            node = node[part]


def test_values_take_nvidia_recoverys_names() -> None:
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    for path in ("controller.environment", "controller.acknowledgeSchedulerActions", "watchdog.enabled",
                 "watchdog.mode", "watchdog.environmentPattern", "watchdog.acknowledgeSchedulerActions"):
        section, key = path.split(".")
        assert key in values[section], path


def test_readme_says_how_to_install() -> None:
    readme = (CHART / "README.md").read_text()
    assert "helm install" in readme and "helm upgrade" in readme


# ----------------------------------------------------------------------------------- rendered


def test_default_values_in_cluster_mode(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    docs = render()
    assert kinds(docs) == ["ConfigMap", "Deployment", "Service", "ServiceAccount"]
    c = worker(docs)
    assert c["image"] == "registry.example.org/jobmedic:0.1.0"
    assert c["readinessProbe"]["httpGet"]["path"] == "/metrics"
    assert env_of(c)["SLURM_CONF"] == "/etc/slurm/slurm.conf"
    assert "JOBMEDIC_AUDIT__URL" not in env_of(c)  # SQLite in the data volume
    pod = one(docs, "Deployment")["spec"]["template"]["spec"]
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes["munge-socket"]["hostPath"]["path"] == "/run/munge"
    assert volumes["slurm-conf"]["hostPath"]["path"] == "/etc/slurm"
    assert pod["serviceAccountName"] == one(docs, "ServiceAccount")["metadata"]["name"]
    # the Service selects the worker's pods and exposes its metrics port
    service = one(docs, "Service", "-metrics")
    assert service["spec"]["selector"].items() <= one(docs, "Deployment")["spec"]["template"]["metadata"]["labels"].items()
    assert service["spec"]["ports"][0]["port"] == c["ports"][0]["containerPort"] == 9464
    s = settings_of(docs, tmp_path, monkeypatch)
    assert s.metrics_port == 9464 and s.data_dir == Path("/var/lib/jobmedic")
    cluster = s.cluster("main")
    assert (cluster.scheduler.access, cluster.mode, cluster.acknowledge_scheduler_actions) == ("local", Mode.OBSERVE, False)
    assert cluster.watchdog.mode is Mode.ACTION  # fail open: release a job jobmedic held past its deadline
    assert s.audit_url == "sqlite:////var/lib/jobmedic/audit.db"
    assert not s.temporal.use_tls()


def test_ssh_mode_mounts_the_key_and_known_hosts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    docs = render(SSH | {"slurm": SSH["slurm"] | {"ssh": SSH["slurm"]["ssh"] | {"env": {"SLURM_CONF": "/etc/slurm/slurm.conf"}}}})
    c = worker(docs)
    assert "SLURM_CONF" not in env_of(c)
    mounts = {m["name"] for m in c["volumeMounts"]}
    assert "ssh" in mounts and "munge-socket" not in mounts and "slurm-conf" not in mounts
    ssh = settings_of(docs, tmp_path, monkeypatch).cluster("main").scheduler
    assert ssh.access == "ssh" and ssh.ssh is not None
    assert (ssh.ssh.host, ssh.ssh.port, ssh.ssh.user) == ("login1.example.org", 22, "jobmedic")
    assert ssh.ssh.env == {"SLURM_CONF": "/etc/slurm/slurm.conf"}
    for path in (ssh.ssh.key_file, ssh.ssh.known_hosts):
        name, volume = mounted_file(docs, path)
        assert volume["secret"]["secretName"] == "jm-ssh"


def test_ssh_mode_needs_the_secret() -> None:
    with pytest.raises(RenderError, match="slurm.ssh.existingSecret"):
        render({"slurm": {"access": "ssh", "ssh": {"host": "login1"}}})
    with pytest.raises(RenderError, match="ssh.host"):
        render({"slurm": {"access": "ssh", "ssh": {"existingSecret": "s"}}})


def test_external_database_from_a_secret(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    docs = render({"audit": {"existingSecret": "jm-audit-db"}, "replicaCount": 2})
    assert "StatefulSet" not in kinds(docs) and "Secret" not in kinds(docs)
    ref = env_of(worker(docs))["JOBMEDIC_AUDIT__URL"]["secretKeyRef"]
    assert ref == {"name": "jm-audit-db", "key": "url"}
    assert settings_of(docs, tmp_path, monkeypatch).audit_url == SECRET_VALUES["JOBMEDIC_AUDIT__URL"]


def test_bundled_mysql_for_a_quickstart(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    docs = render({"mysql": {"enabled": True, "password": "p@ss:w/rd +1", "rootPassword": "r00t"}})
    assert kinds(docs) == ["ConfigMap", "Deployment", "Secret", "Service", "Service", "ServiceAccount", "StatefulSet"]
    secret = one(docs, "Secret", "-mysql")
    url = make_url(secret["stringData"]["audit-url"])
    service = one(docs, "Service", "-mysql")
    assert (url.drivername, url.host, url.port, url.database) == ("mysql+pymysql", service["metadata"]["name"], 3306, "jobmedic")
    assert (url.username, url.password) == ("jobmedic", "p@ss:w/rd +1")
    ref = env_of(worker(docs))["JOBMEDIC_AUDIT__URL"]["secretKeyRef"]
    assert ref == {"name": secret["metadata"]["name"], "key": "audit-url"}
    db = one(docs, "StatefulSet")
    assert db["spec"]["serviceName"] == service["metadata"]["name"]
    mysql_env = env_of(db["spec"]["template"]["spec"]["containers"][0])
    assert mysql_env["MYSQL_PASSWORD"]["secretKeyRef"] == {"name": secret["metadata"]["name"], "key": "mysql-password"}
    assert service["spec"]["selector"].items() <= db["spec"]["template"]["metadata"]["labels"].items()
    # the worker's Service does not select the database pod, nor the other way round
    assert not one(docs, "Service", "-metrics")["spec"]["selector"].items() <= db["spec"]["template"]["metadata"]["labels"].items()
    settings_of(docs, tmp_path, monkeypatch)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"mysql": {"enabled": True, "rootPassword": "r"}}, "mysql.password is required"),
        ({"mysql": {"enabled": True, "password": "p", "rootPassword": "r"}, "audit": {"existingSecret": "db"}}, "not both"),
        ({"replicaCount": 2}, "shared audit database"),
        ({"clusters": [{"name": "a", "access": "slurmrestd"}]}, "access must be inCluster or ssh"),
        ({"clusters": [{"pollIntervalSeconds": 15}]}, "every cluster needs a name"),
        ({"slurm": {"inCluster": {"munge": {"socketHostPath": ""}}}}, "set socketHostPath or keySecret"),
    ],
)
def test_contradictions_stop_the_install(overrides: dict[str, Any], message: str) -> None:
    with pytest.raises(RenderError, match=message):
        render(overrides)


def test_temporal_tls_and_api_key_from_secrets(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    docs = render({"temporal": {
        "address": "temporal.example.org:7233",
        "namespace": "prod.a1b2c",
        "tls": {"caSecret": "temporal-ca", "clientCertSecret": "jm-temporal-client", "serverName": "temporal.internal"},
        "apiKey": {"existingSecret": "jm-temporal-key"},
    }})
    assert env_of(worker(docs))["JOBMEDIC_TEMPORAL__API_KEY"]["secretKeyRef"] == {"name": "jm-temporal-key", "key": "api-key"}
    t = settings_of(docs, tmp_path, monkeypatch).temporal
    assert (t.address, t.namespace, t.use_tls(), t.tls.server_name) == ("temporal.example.org:7233", "prod.a1b2c", True, "temporal.internal")
    assert t.api_key is not None
    for path, secret in ((t.tls.ca_file, "temporal-ca"), (t.tls.cert_file, "jm-temporal-client"), (t.tls.key_file, "jm-temporal-client")):
        assert path is not None
        _, volume = mounted_file(docs, path)
        assert volume["secret"]["secretName"] == secret


def test_munged_sidecar_with_the_cluster_key() -> None:
    docs = render({"slurm": {"inCluster": {"munge": {"socketHostPath": "", "keySecret": "munge-key"},
                                           "slurmConf": {"configMap": "slurm-conf"}}}})
    pod = one(docs, "Deployment")["spec"]["template"]["spec"]
    containers = {c["name"]: c for c in pod["containers"]}
    munged = containers["munged"]
    assert munged["command"][0] == "munged" and "--foreground" in munged["command"]
    socket = next(a.split("=", 1)[1] for a in munged["command"] if a.startswith("--socket="))
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert "emptyDir" in volumes["munge-socket"]
    assert volumes["munge-key"]["secret"]["secretName"] == "munge-key"
    assert volumes["slurm-conf"]["configMap"]["name"] == "slurm-conf"
    # both containers see the same socket directory, where libmunge looks by default
    for c in (munged, containers["worker"]):
        assert {"name": "munge-socket", "mountPath": "/run/munge"}.items() <= next(
            m for m in c["volumeMounts"] if m["name"] == "munge-socket").items()
    assert socket == "/run/munge/munge.socket.2"


def test_nvidia_recovery_names_become_the_safety_switches(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    docs = render({
        "controller": {"environment": "prod", "mode": "action", "acknowledgeSchedulerActions": True},
        "watchdog": {"environmentPattern": "prod|canary"},
        "clusters": [
            {"name": "canary", "environment": "canary"},
            # a cluster's own `false` wins over the controller's `true` (not Helm's `default`, which skips false)
            {"name": "big", "acknowledgeSchedulerActions": False, "environmentPattern": "prod", "policy": {"max_attempts": 9}},
        ],
    } | SSH)
    s = settings_of(docs, tmp_path, monkeypatch)
    canary, big = s.cluster("canary"), s.cluster("big")
    assert (canary.environment, canary.environment_pattern, canary.mode, canary.acknowledge_scheduler_actions) == (
        "canary", "prod|canary", Mode.ACTION, True)
    assert canary.may_act("canary", Mode.ACTION)
    assert (big.environment, big.environment_pattern, big.acknowledge_scheduler_actions) == ("prod", "prod", False)
    assert not big.may_act("prod", Mode.ACTION)
    assert big.policy.max_attempts == 9 and canary.policy.max_attempts == 5


@pytest.mark.parametrize(
    ("watchdog", "mode"),
    [
        ({}, Mode.ACTION),
        ({"enabled": False}, Mode.OBSERVE),
        ({"mode": "observe"}, Mode.OBSERVE),
        ({"acknowledgeSchedulerActions": False}, Mode.OBSERVE),
    ],
)
def test_the_watchdog_acts_only_enabled_in_action_and_acknowledged(
    watchdog: dict[str, Any], mode: Mode, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    s = settings_of(render({"watchdog": watchdog}), tmp_path, monkeypatch)
    assert s.cluster().watchdog.mode is mode


def test_clusters_mix_access_modes_logs_and_prometheus(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    docs = render({
        "slurm": {"ssh": {"existingSecret": "jm-ssh", "host": "login.a"}},
        "logs": {"kind": "loki", "url": "http://loki:3100", "jobLabel": "job_id"},
        "prometheus": {"url": "http://prometheus:9090"},
        "clusters": [
            {"name": "a", "access": "ssh", "ssh": {"port": 2222}},
            {"name": "b", "logs": {"kind": "files"}, "prometheus": {"hostLabel": "host"}, "hang": {"floor_s": 600}},
        ],
    })
    mounts = {m["name"] for m in worker(docs)["volumeMounts"]}
    assert {"ssh", "munge-socket", "slurm-conf"} <= mounts
    s = settings_of(docs, tmp_path, monkeypatch)
    a, b = s.cluster("a"), s.cluster("b")
    assert a.scheduler.access == "ssh" and a.scheduler.ssh is not None and a.scheduler.ssh.port == 2222
    assert (a.logs.kind, a.logs.url, a.logs.job_label) == ("loki", "http://loki:3100", "job_id")
    assert b.scheduler.access == "local" and b.logs.kind == "files"
    assert (b.metrics.prometheus_url, b.metrics.host_label, a.metrics.host_label) == ("http://prometheus:9090", "host", "Hostname")
    assert b.hang.floor_s == 600


def test_persistence_claims_the_data_volume() -> None:
    docs = render({"persistence": {"enabled": True, "size": "5Gi"}})
    claim = one(docs, "PersistentVolumeClaim")
    pod = one(docs, "Deployment")["spec"]["template"]["spec"]
    data = next(v for v in pod["volumes"] if v["name"] == "data")
    assert data["persistentVolumeClaim"]["claimName"] == claim["metadata"]["name"]
    assert claim["spec"]["resources"]["requests"]["storage"] == "5Gi"


def test_a_changed_value_rolls_the_pods() -> None:
    annotations = lambda docs: one(docs, "Deployment")["spec"]["template"]["metadata"]["annotations"]  # noqa: E731
    assert annotations(render())["checksum/values"] != annotations(render({"logLevel": "DEBUG"}))["checksum/values"]
