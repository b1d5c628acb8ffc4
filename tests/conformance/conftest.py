"""The conformance corpus's mock runs share the mock-cluster workers of the session; stop them at its end."""

import pytest

from tt_rmsnorm import mock_cluster


@pytest.fixture(scope="session", autouse=True)
def _stop_mock_workers():
    yield
    mock_cluster.shutdown_workers()
