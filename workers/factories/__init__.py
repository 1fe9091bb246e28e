"""The adapters, built once from settings: the worker and the CLI call these and pass the result down.

They live in `workers/`, next to the settings they read, so that nothing in `adapters/`
imports upward (tests/adapters/test_layering.py checks it). One module per adapter, so a
command that needs one of them does not load the others.

* `audit` - `build_audit_store(settings)`, `build_async_audit_store(settings)`.
* `logs` - `watch_log_source(log_settings)` (what the watch reads: files or a store), `file_log_source`, `job_log_store`.
* `slurm` - `build_runner(cluster_settings)`, `build_slurm_client(cluster_settings)`.
"""
