"""The real-stack scorecard test runs on the end-to-end tests' fixtures (one jobmedic deployment per test)."""

from tests.workflows.conftest import scenario, worker  # noqa: F401 - fixtures, found by name
