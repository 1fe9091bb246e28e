"""Check every real-format case against FORMAT.md: fields, labels, names, a source URL, sizes.

`python tests/corpus/real/validate.py [FOLDER...]` prints one line per problem and exits 1 on any;
tests/detection/test_real_corpus.py runs the same checks.
"""

from __future__ import annotations

import json
import re
import sys
from collections import Counter
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[2]))
from activities.detection.analyze import parse_layout  # noqa: E402
from adapters.errors import ParseError  # noqa: E402
CATEGORIES = {"nccl_timeout", "nccl_error", "cuda_error", "gpu_oom", "gpu_hardware", "interconnect", "hang",
              "node_failure", "time_limit", "preempted", "app_error", "data_io", "host_oom", "none"}
DOMAINS = {"hardware", "network", "node", "system_software", "application", "resource", "scheduler", "unknown"}
STATES = {"FAILED", "TIMEOUT", "NODE_FAIL", "PREEMPTED", "OUT_OF_MEMORY", "CANCELLED", "COMPLETED", "RUNNING"}
_NAME = re.compile(r"^[a-z0-9_]+-[A-Za-z0-9-]+$")
MAX_PER_URL = 3


def problems(folder: Path) -> list[str]:
    out: list[str] = []
    urls: Counter[str] = Counter()
    for side_path in sorted(folder.glob("*.expected.json")):
        name = side_path.name.removesuffix(".expected.json")
        where = f"{folder.name}/{name}"
        log = folder / f"{name}.log"
        try:
            side = json.loads(side_path.read_text())
        except json.JSONDecodeError as exc:
            out.append(f"{where}: sidecar is not JSON ({exc.msg})")
            continue
        if not _NAME.match(name) or not name.startswith(side.get("category", "?") + "-"):
            out.append(f"{where}: name must be <category>-<slug>")
        if not log.is_file():
            out.append(f"{where}: no .log beside the sidecar")
        else:
            lines = log.read_text(errors="replace").splitlines()
            if not 3 <= len(lines) <= 120:
                out.append(f"{where}: {len(lines)} log lines (3..120)")
        if side.get("category") not in CATEGORIES:
            out.append(f"{where}: category {side.get('category')!r}")
        if side.get("fault_domain") not in DOMAINS:
            out.append(f"{where}: fault_domain {side.get('fault_domain')!r}")
        url = side.get("source", "")
        if not isinstance(url, str) or not url.startswith(("https://", "http://")):
            out.append(f"{where}: no source URL")
        urls[url] += 1
        if not side.get("note"):
            out.append(f"{where}: no note")
        job = side.get("job") or {}
        if job and job.get("state") not in STATES:
            out.append(f"{where}: job state {job.get('state')!r}")
        if side.get("layout"):
            try:
                parse_layout(side["layout"])
            except ParseError as exc:
                out.append(f"{where}: layout {side['layout']!r}: {exc}")
        names = {n.get("name") for n in side.get("cluster_nodes", [])} | set(job.get("nodes") or [])
        for host in side.get("hosts", []):
            if names and host not in names:
                out.append(f"{where}: blamed host {host} is not among the case's nodes")
        if side.get("hosts", []) != sorted(side.get("hosts", [])):
            out.append(f"{where}: hosts not sorted")
    for url, n in urls.items():
        if n > MAX_PER_URL:
            out.append(f"{folder.name}: {n} cases share {url} (at most {MAX_PER_URL})")
    return out


def main(argv: list[str]) -> int:
    folders = [Path(a) for a in argv] or [HERE / s for s in ("tune", "holdout", "pool") if (HERE / s).is_dir()]
    found = [p for f in folders for p in problems(f)]
    for p in found:
        print(p)
    total = sum(len(list(f.glob("*.expected.json"))) for f in folders)
    print(f"{total} cases, {len(found)} problem(s)")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
