"""The Slurm adapter: how jobmedic sees and acts on a Slurm cluster.

* `runner` - `CommandRunner` port; `LocalRunner` (subprocess) and `SshRunner`
  (one reused asyncssh connection, host keys verified, SFTP on the same
  connection for log readers).
* `client` - `SlurmClient`: `list_jobs` / `list_nodes` in one query each,
  idempotent actions that return the state the scheduler confirms, and
  `same_job`, the rule that tells a requeued job from a recycled job id.
* `parse`, `hostlist`, `optin` - pure parsers of `squeue --json` /
  `sinfo --json`, host lists and job-comment opt-ins.

Slurm 22.05 facts the code relies on (observed on the local test cluster):
`squeue --json` ignores `-j`/`-t` and exits 0 with an `errors` list when the
controller is unreachable; a requeue moves the job's submit time; comments are
limited to 1024 bytes by sbatch; `scancel` of an unknown id exits 0.
"""
