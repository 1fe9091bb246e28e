#!/usr/bin/env bash
# deploy/quickstart.sh [demo arguments] - from a fresh clone, any working directory: build the
# virtual environment, bring the local stack up, and run `jobmedic demo` on the embedded defaults
# (the local Slurm cluster through SLURM_CONF, the Temporal dev server, SQLite for the audit store).
set -euo pipefail
DEPLOY=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(dirname "$DEPLOY")
bash "$DEPLOY/bootstrap.sh"
bash "$DEPLOY/up.sh"
# SLURM_CONF and the Temporal address of the stack just brought up
# shellcheck disable=SC1091
source "${JOBMEDIC_STACK_DIR:-/tmp/jobmedic-stack}/env.sh"
cd "$REPO"
exec "$REPO/.venv/bin/jobmedic" demo "$@"
