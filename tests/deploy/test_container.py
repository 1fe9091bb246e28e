"""The worker's container image, `deploy/container/Dockerfile`, checked statically.

No container runtime (docker daemon, buildkit, podman, buildah) is in the package
registries this project can reach, so the image is NOT built here: these tests read
the Dockerfile as Docker parses it (continuation lines, stages, exec-form JSON) and
check what a build would otherwise prove or what a reviewer would look for. A real
`docker build -f deploy/container/Dockerfile .` is still to be run where Docker is.
"""

from __future__ import annotations

import fnmatch
import json
import re
import shlex
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DOCKERFILE = REPO / "deploy" / "container" / "Dockerfile"
DOCKERIGNORE = REPO / "deploy" / "container" / "Dockerfile.dockerignore"
BUILD_TOOLS = {"build-essential", "gcc", "g++", "make", "cmake", "clang", "cpp", "libc6-dev", "python3-dev"}


@dataclass
class Stage:
    base: str
    name: str | None
    instructions: list[tuple[str, str]] = field(default_factory=list)

    def args_of(self, keyword: str) -> list[str]:
        return [arg for kw, arg in self.instructions if kw == keyword]


def parse_dockerfile(text: str) -> tuple[dict[str, str], list[Stage]]:
    """(global ARG defaults, stages) of a Dockerfile; `\\` continues a line, `#` lines are comments."""
    logical: list[str] = []
    pending = ""
    for raw in text.splitlines():
        stripped = raw.strip()
        if not pending and (not stripped or stripped.startswith("#")):
            continue
        if pending and stripped.startswith("#"):
            continue  # comment lines inside a continued instruction are dropped by Docker too
        if stripped.endswith("\\"):
            pending += stripped[:-1] + " "
            continue
        logical.append(pending + stripped)
        pending = ""
    assert not pending, "the Dockerfile ends inside a continued line"
    global_args: dict[str, str] = {}
    stages: list[Stage] = []
    for line in logical:
        keyword, _, arg = line.partition(" ")
        keyword = keyword.upper()
        arg = arg.strip()
        if keyword == "FROM":
            parts = arg.split()
            parts = [p for p in parts if not p.startswith("--platform=")]
            name = parts[2] if len(parts) == 3 and parts[1].upper() == "AS" else None
            stages.append(Stage(base=_substitute(parts[0], global_args), name=name))
        elif not stages:
            assert keyword == "ARG", f"only ARG may come before the first FROM, not {keyword}"
            key, _, default = arg.partition("=")
            global_args[key] = default
        else:
            stages[-1].instructions.append((keyword, arg))
    return global_args, stages


def _substitute(value: str, args: dict[str, str]) -> str:
    return re.sub(r"\$\{(\w+)\}|\$(\w+)", lambda m: args[m.group(1) or m.group(2)], value)


def installed_packages(run_args: list[str]) -> set[str]:
    """Package names given to `apt-get install` (or apt, pip) in these RUN instructions."""
    found: set[str] = set()
    for run in run_args:
        for command in re.split(r"&&|;|\|\|", run):
            words = shlex.split(command)
            if len(words) >= 2 and words[0] in {"apt-get", "apt"} and "install" in words:
                found |= {w for w in words[words.index("install") + 1 :] if not w.startswith("-")}
    return found


@pytest.fixture(scope="module")
def dockerfile() -> tuple[dict[str, str], list[Stage]]:
    return parse_dockerfile(DOCKERFILE.read_text())


def test_multi_stage_with_a_separate_runtime_stage(dockerfile) -> None:
    _, stages = dockerfile
    assert len(stages) >= 2
    names = {s.name for s in stages}
    final = stages[-1]
    # FROM <earlier stage> would inherit its compilers
    assert final.base not in names, f"the final stage is based on stage {final.base!r}"
    assert final.base.startswith("python:") and "-slim-" in final.base


def test_final_stage_runs_as_a_non_root_user(dockerfile) -> None:
    final = dockerfile[1][-1]
    users = final.args_of("USER")
    assert users, "the final stage sets no USER: the image would run as root"
    user = users[-1].split(":")[0]
    assert user not in {"root", "0"}
    # the numeric id is created in the image (Kubernetes' runAsNonRoot needs a numeric USER)
    assert user.isdigit()
    assert any(f"--uid {user}" in run for run in final.args_of("RUN"))


def test_no_build_tools_in_the_final_stage(dockerfile) -> None:
    _, stages = dockerfile
    final = stages[-1]
    assert installed_packages(final.args_of("RUN")) & BUILD_TOOLS == set()
    assert not any("pip install" in run for run in final.args_of("RUN")), "the final stage builds nothing"
    # the compilers are where they belong, in a stage that the final one only copies from
    assert "build-essential" in installed_packages(stages[0].args_of("RUN"))


def test_slurm_client_and_munge_for_in_cluster_mode(dockerfile) -> None:
    final = dockerfile[1][-1]
    packages = installed_packages(final.args_of("RUN"))
    assert {"slurm-client", "munge"} <= packages
    # SSH mode is asyncssh: no ssh binary is needed, none is installed
    assert "openssh-client" not in packages
    # a key generated at image build would be the same in every container: removed
    assert any("/etc/munge/munge.key" in run and "rm " in run for run in final.args_of("RUN"))


def test_entrypoint_is_the_worker(dockerfile) -> None:
    final = dockerfile[1][-1]
    (entrypoint,) = final.args_of("ENTRYPOINT")
    # exec form: the worker is PID 1 and receives SIGTERM itself
    assert json.loads(entrypoint) == ["jobmedic", "worker"]
    env = " ".join(final.args_of("ENV"))
    assert "PATH=/opt/jobmedic/bin:" in env


def test_every_copy_source_exists_and_reaches_the_build(dockerfile) -> None:
    _, stages = dockerfile
    ignore = [line.strip() for line in DOCKERIGNORE.read_text().splitlines() if line.strip() and not line.startswith("#")]
    seen_stages: set[str] = set()
    copied: set[str] = set()
    for stage in stages:
        for arg in stage.args_of("COPY"):
            words = arg.split()
            flags = [w for w in words if w.startswith("--")]
            *sources, _dest = [w for w in words if not w.startswith("--")]
            source_stage = next((f.split("=", 1)[1] for f in flags if f.startswith("--from=")), None)
            if source_stage is not None:
                assert source_stage in seen_stages, f"COPY --from={source_stage} names no earlier stage"
                continue
            for source in sources:
                path = REPO / source
                assert path.exists(), f"COPY source {source} does not exist in the repository"
                assert _kept(source.rstrip("/"), ignore), f"{source} is excluded by {DOCKERIGNORE.name}"
                copied.add(source.rstrip("/"))
        if stage.name:
            seen_stages.add(stage.name)
    # what `pip install .` needs: the packages setuptools finds and the readme pyproject names
    project = tomllib.loads((REPO / "pyproject.toml").read_text())
    packages = {p.rstrip("*") for p in project["tool"]["setuptools"]["packages"]["find"]["include"]}
    assert packages | {"pyproject.toml", project["project"]["readme"]} <= copied


def _kept(path: str, patterns: list[str]) -> bool:
    """Whether a .dockerignore keeps `path` (the last matching pattern wins; `!` re-includes)."""
    kept = True
    for pattern in patterns:
        negate = pattern.startswith("!")
        glob = pattern[1:] if negate else pattern
        if fnmatch.fnmatch(path, glob.rstrip("/")):
            kept = negate
    return kept
