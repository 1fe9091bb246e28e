"""The systemd units for a one-node install: `deploy/systemd/jobmedic-worker.service` and `temporal-dev.service`.

`deploy/systemd/verify.sh` runs `systemd-analyze verify` and `systemd-analyze security --offline`
on them (installing Debian's systemd package when systemd-analyze is missing). systemd is not
PID 1 on this machine, so the units are verified, not started: that the worker runs under
this sandbox (munge socket, ssh, scontrol) is to be confirmed on a real node.
"""

from __future__ import annotations

import re
import subprocess
from collections import defaultdict
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
UNITS = REPO / "deploy" / "systemd"
VERIFY = UNITS / "verify.sh"


def directives(unit: Path) -> dict[str, list[str]]:
    """`Key=value` lines of a unit (continuation lines joined), every value of a repeated key in order."""
    found: dict[str, list[str]] = defaultdict(list)
    text = re.sub(r"\\\n\s*", " ", unit.read_text())
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith(("#", ";", "[")):
            key, _, value = line.partition("=")
            found[key.strip()].append(value.strip())
    return found


def run_verify(*units: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", str(VERIFY), *map(str, units)], capture_output=True, text=True, timeout=120, check=False)


def test_systemd_analyze_verify_and_security_pass() -> None:
    done = run_verify()
    assert done.returncode == 0, done.stdout + done.stderr
    assert "jobmedic-worker.service: verify ok" in done.stdout
    assert "temporal-dev.service: verify ok" in done.stdout


def test_a_misspelt_directive_fails_the_check(tmp_path: Path) -> None:
    bad = tmp_path / "jobmedic-worker.service"
    bad.write_text((UNITS / "jobmedic-worker.service").read_text().replace("ProtectSystem=", "ProtectSystm="))
    done = run_verify(bad)
    assert done.returncode != 0
    assert "Unknown key 'ProtectSystm'" in done.stderr


def test_weaker_hardening_fails_the_check(tmp_path: Path) -> None:
    weak = tmp_path / "temporal-dev.service"
    text = (UNITS / "temporal-dev.service").read_text()
    weak.write_text(re.sub(r"^(Protect|Private|Restrict|SystemCall|Capability|NoNewPriv)\w*=.*\n", "", text, flags=re.M))
    done = run_verify(weak)
    assert done.returncode != 0 and "exposure" in done.stderr


@pytest.mark.parametrize("name", ["jobmedic-worker.service", "temporal-dev.service"])
def test_hardened(name: str) -> None:
    d = directives(UNITS / name)
    assert d["NoNewPrivileges"] == ["yes"]
    assert d["ProtectSystem"] == ["strict"]
    assert d["CapabilityBoundingSet"] == [""] and d["AmbientCapabilities"] == [""]
    assert d["PrivateTmp"] == ["yes"] and d["ProtectHome"][0] in {"yes", "read-only"}
    assert d["SystemCallFilter"][0] == "@system-service"
    # the only writable place is the state directory
    (state,) = d["StateDirectory"]
    assert d["ReadWritePaths"] == [f"/var/lib/{state}"]
    assert set(d["RestrictAddressFamilies"][0].split()) == {"AF_UNIX", "AF_INET", "AF_INET6"}


def test_the_worker_can_do_its_job() -> None:
    d = directives(UNITS / "jobmedic-worker.service")
    assert d["ExecStart"] == ["/opt/jobmedic/bin/jobmedic worker"]
    assert d["User"] == ["jobmedic"]
    assert "JOBMEDIC_CONFIG=/etc/jobmedic/jobmedic.toml" in d["Environment"]
    assert d["ReadWritePaths"] == ["/var/lib/jobmedic"] and "JOBMEDIC_DATA_DIR=/var/lib/jobmedic" in d["Environment"]
    # munged's socket: AF_UNIX allowed, /run/munge not hidden, started first
    assert "munge.service" in d["After"][0] and "munge.service" in d["Wants"]
    assert not any("/run" in v for v in d.get("InaccessiblePaths", []) + d.get("TemporaryFileSystem", []))
    # job output files under /home are read by the `files` log source
    assert d["ProtectHome"] == ["read-only"]
    # secrets come from a root-only file, not the unit
    assert d["EnvironmentFile"] == ["-/etc/jobmedic/jobmedic.env"]


def test_the_dev_server_is_local_and_has_jobmedics_search_attributes() -> None:
    d = directives(UNITS / "temporal-dev.service")
    (exec_start,) = d["ExecStart"]
    assert "--ip 127.0.0.1" in exec_start and "--ui-ip 127.0.0.1" in exec_start
    assert "--db-filename /var/lib/temporal-dev/temporal.db" in exec_start
    up = (REPO / "deploy" / "temporal" / "up.sh").read_text()
    wanted = re.search(r"SEARCH_ATTRIBUTES=\((.*?)\)", up, re.S)
    assert wanted is not None
    assert set(re.findall(r"--search-attribute (\S+)", exec_start)) == set(wanted.group(1).split())
    assert d["DynamicUser"] == ["yes"]
