"""`jobmedic check` against the real things: private Slurm clusters (one as deploy/ configures it, one
whose slurm.conf a test changes), the sshd, the Temporal dev server, SQLite on a read-only mount.

Each misconfiguration the command claims to catch is provoked once; the all-OK run is the first test.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from adapters.audit.migrations import LATEST_VERSION
from adapters.audit.store import AuditStore
from adapters.slurm.parse import load_document
from tests.check.conftest import PrivateSlurm, finding, run_check, write_config
from workers import checks

REPO = Path(__file__).resolve().parents[2]
TEMPORAL = [str(REPO / ".venv/bin/temporal"), "--disable-config-env", "--disable-config-file",
            "--address", "127.0.0.1:7233", "--command-timeout", "10s"]


def test_all_ok_on_a_cluster_set_up_as_deploy_does(good_slurm: PrivateSlurm, temporal_server: object,
                                                   tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    AuditStore(f"sqlite:///{tmp_path / 'audit.db'}").migrate()
    code, found = run_check(write_config(tmp_path, slurm_conf=good_slurm.conf), capsys)
    assert code == 0, found
    assert [f for f in found if f["status"] != "OK"] == []
    assert {f["check"] for f in found} >= {
        "slurm.reachable", "slurm.fields", "slurm.job_comments", "slurm.min_job_age", "slurm.job_requeue",
        "slurm.output_paths", "logs.recent_job", "metrics.configured", "audit.writable", "audit.schema",
        "temporal.reachable", "temporal.search_attributes"}
    assert "read 3 line(s)" in finding(found, "logs.recent_job")["message"]
    # the text form: one line per finding, status first
    main_lines = _text_run(write_config(tmp_path, slurm_conf=good_slurm.conf), capsys)
    assert len(main_lines) == len(found) and all(line.startswith("OK   ") for line in main_lines)


def _text_run(config: Path, capsys: pytest.CaptureFixture[str]) -> list[str]:
    from workers.cli import main

    capsys.readouterr()
    assert main(["--config", str(config), "check"]) == 0
    return capsys.readouterr().out.splitlines()


def test_output_files_not_visible_fail(good_slurm: PrivateSlurm, temporal_server: object, tmp_path: Path,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    moved = good_slurm.outputs.with_name("outputs.moved")
    good_slurm.outputs.rename(moved)  # as if the jobs' file system were not mounted where jobmedic runs
    try:
        code, found = run_check(write_config(tmp_path, slurm_conf=good_slurm.conf), capsys)
    finally:
        moved.rename(good_slurm.outputs)
    assert code == 1
    paths = finding(found, "slurm.output_paths")
    assert paths["status"] == "FAIL" and "mount the file system" in paths["message"]
    assert str(good_slurm.outputs / "out-") in paths["message"]


def test_output_files_over_sftp(good_slurm: PrivateSlurm, sshd: object, temporal_server: object, tmp_path: Path,
                                capsys: pytest.CaptureFixture[str]) -> None:
    scheduler = (f'access = "ssh"\n[clusters.scheduler.ssh]\nhost = "{sshd.host}"\nport = {sshd.port}\n'  # type: ignore[attr-defined]
                 f'user = "{sshd.user}"\nkey_file = "{sshd.key_file}"\nknown_hosts = "{sshd.known_hosts}"\n'  # type: ignore[attr-defined]
                 f'env = {{ SLURM_CONF = "{good_slurm.conf}" }}')
    code, found = run_check(write_config(tmp_path, scheduler=scheduler), capsys, "--cluster", "lab")
    assert finding(found, "slurm.reachable")["message"].endswith(f"(ssh {sshd.user}@{sshd.host}:{sshd.port})")  # type: ignore[attr-defined]
    assert "readable over SFTP" in finding(found, "slurm.output_paths")["message"]
    assert finding(found, "logs.recent_job")["status"] == "OK"


def test_scheduler_unreachable_local_and_by_ssh(good_slurm: PrivateSlurm, sshd: object, temporal_server: object,
                                                tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # local: a slurm.conf naming a controller port nothing listens on
    conf = tmp_path / "slurm.conf"
    conf.write_text(good_slurm.conf.read_text().replace(
        f"SlurmctldPort={good_slurm.env['JOBMEDIC_SLURM_CTLD_PORT']}", "SlurmctldPort=9"))
    code, found = run_check(write_config(tmp_path, slurm_conf=conf, extra="poll_interval_s = 15"), capsys)
    assert code == 1
    down = finding(found, "slurm.reachable")
    assert down["status"] == "FAIL" and "scontrol ping" in down["message"]
    assert not [f for f in found if f["check"].startswith("slurm.") and f["check"] != "slurm.reachable"]
    # SSH: the login node's host key is not the one known_hosts lists
    scheduler = (f'access = "ssh"\n[clusters.scheduler.ssh]\nhost = "{sshd.host}"\nport = {sshd.port}\n'  # type: ignore[attr-defined]
                 f'user = "{sshd.user}"\nkey_file = "{sshd.key_file}"\nknown_hosts = "{sshd.wrong_known_hosts}"')  # type: ignore[attr-defined]
    code, found = run_check(write_config(tmp_path, scheduler=scheduler), capsys)
    assert code == 1
    rejected = finding(found, "slurm.reachable")
    assert rejected["status"] == "FAIL" and rejected["setting"] == "clusters.lab.scheduler.ssh"
    assert "known_hosts" in rejected["message"]


def test_short_min_job_age_no_requeue_and_accounting_without_comments(
    bad_slurm: PrivateSlurm, temporal_server: object, tmp_path: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    # slurmdbd accounting (none answers: slurmctld runs anyway), comments not kept, jobs forgotten after 60 s
    bad_slurm.set_conf(AccountingStorageType="accounting_storage/slurmdbd", AccountingStorageHost="127.0.0.1",
                       AccountingStoragePort="9", AccountingStoreFlags="", MinJobAge="60", JobRequeue="0")
    code, found = run_check(write_config(tmp_path, slurm_conf=bad_slurm.conf), capsys)
    assert code == 1
    age = finding(found, "slurm.min_job_age")
    assert age["status"] == "FAIL" and "MinJobAge (60 s)" in age["message"]
    assert "raise MinJobAge in slurm.conf to at least 270" in age["message"]
    comments = finding(found, "slurm.job_comments")
    assert comments["status"] == "WARN" and comments["setting"] == "AccountingStoreFlags"
    assert "AccountingStoreFlags=job_comment" in comments["message"]
    requeue = finding(found, "slurm.job_requeue")
    assert requeue["status"] == "WARN" and "#SBATCH --requeue" in requeue["message"]


def test_json_fields_missing_is_a_failure(good_slurm: PrivateSlurm) -> None:
    """Parsing test on this Slurm's real output, less one field (as an older Slurm prints it)."""
    jobs = load_document(good_slurm.slurm("squeue", "--json").stdout, what="squeue", list_key="jobs")
    nodes = load_document(good_slurm.slurm("sinfo", "--json").stdout, what="sinfo", list_key="nodes")
    assert checks.slurm_fields(jobs, nodes, cluster="lab").status == "OK"
    for job in jobs:
        job.pop("standard_output")
    bad = checks.slurm_fields(jobs, nodes, cluster="lab")
    assert bad.status == "FAIL" and "squeue standard_output" in bad.message and "21.08" in bad.message


# --------------------------------------------------------------------------- audit store


@pytest.fixture
def read_only_dir(tmp_path: Path) -> Iterator[Path]:
    """A tmpfs holding a migrated audit.db, remounted read-only (root ignores file modes; a mount does not)."""
    where = tmp_path / "ro"
    where.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(where)], check=True)
    try:
        store = AuditStore(f"sqlite:///{where / 'audit.db'}")
        store.migrate()
        store.close()
        subprocess.run(["mount", "-o", "remount,ro", str(where)], check=True)
        yield where
    finally:
        subprocess.run(["umount", str(where)], check=False)


def test_audit_store_in_a_read_only_directory(good_slurm: PrivateSlurm, temporal_server: object, read_only_dir: Path,
                                              tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = write_config(tmp_path, slurm_conf=good_slurm.conf, audit_url=f"sqlite:///{read_only_dir / 'audit.db'}")
    code, found = run_check(config, capsys)
    assert code == 1
    audit = finding(found, "audit.writable")
    assert audit["status"] == "FAIL" and f"make {read_only_dir} and audit.db writable" in audit["message"]
    # a store not created yet, in that directory
    config = write_config(tmp_path, slurm_conf=good_slurm.conf, audit_url=f"sqlite:///{read_only_dir / 'new' / 'a.db'}")
    code, found = run_check(config, capsys)
    assert code == 1 and "is not writable" in finding(found, "audit.writable")["message"]


def test_audit_store_not_migrated_warns(good_slurm: PrivateSlurm, temporal_server: object, tmp_path: Path,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    AuditStore(f"sqlite:///{tmp_path / 'audit.db'}").migrate(target=1)
    code, found = run_check(write_config(tmp_path, slurm_conf=good_slurm.conf), capsys)
    assert code == 0
    schema = finding(found, "audit.schema")
    assert schema["status"] == "WARN", schema
    assert f"schema version 1, this jobmedic's is {LATEST_VERSION}" in schema["message"], schema


# --------------------------------------------------------------------------- Temporal


def test_temporal_namespace_that_does_not_exist(good_slurm: PrivateSlurm, temporal_server: object, tmp_path: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    config = write_config(tmp_path, slurm_conf=good_slurm.conf, temporal={"namespace": "jobmedic-check-nowhere"})
    code, found = run_check(config, capsys)
    assert code == 1
    missing = finding(found, "temporal.namespace")
    assert missing["status"] == "FAIL" and "temporal operator namespace create --namespace jobmedic-check-nowhere" in missing["message"]


def test_temporal_search_attributes_not_registered(good_slurm: PrivateSlurm, temporal_server: object,
                                                   tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # a namespace of its own, without jobmedic's attributes (created once on the dev server, reused)
    subprocess.run([*TEMPORAL, "operator", "namespace", "create", "--namespace", "jobmedic-check-bare"],
                   capture_output=True, timeout=30, check=False)
    config = write_config(tmp_path, slurm_conf=good_slurm.conf, temporal={"namespace": "jobmedic-check-bare"})
    code, found = run_check(config, capsys)
    assert code == 1
    attrs = finding(found, "temporal.search_attributes")
    assert attrs["status"] == "FAIL"
    assert ("temporal operator search-attribute create --address 127.0.0.1:7233 --namespace jobmedic-check-bare "
            "--name JobId --type Keyword") in attrs["message"]
    assert "--name ImplicatedNodes --type KeywordList" in attrs["message"]
    assert json.dumps(attrs)  # one JSON object per finding
