"""The conformance corpus's mock runs share the mock-cluster workers of the session; stop them at its end."""

import pytest

from tt_rmsnorm.testing import workers


@pytest.fixture(scope="session", autouse=True)
def _stop_mock_workers():
    yield
    workers.shutdown_workers()
