"""Record a workflow's history as JSON for the replay tests.

    python tests/workflows/record_history.py WORKFLOW_ID histories/job_recovery-v1-demo.json
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path


def main() -> int:
    if len(sys.argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    workflow_id, out = sys.argv[1], Path(sys.argv[2])
    temporal = str(Path(sys.executable).parent / "temporal")
    text = subprocess.run(
        [temporal, "workflow", "show", "-w", workflow_id, "-o", "json"], check=True, capture_output=True, text=True
    ).stdout
    out.write_text(text)
    print(f"wrote {out} ({len(text)} bytes)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
