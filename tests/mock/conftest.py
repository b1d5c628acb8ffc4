"""Mock-cluster tests: real ttnn 0.81.1 on mock N150 / N300 / T3000 / Galaxy clusters, always in worker processes
(tt_rmsnorm.testing.workers.run_isolated), never in the pytest process itself: ttnn keeps one cluster per process and
segfaults on some inputs. The workers are shared by all tests of a session and stopped at its end."""

import pytest

from tt_rmsnorm.testing import workers


@pytest.fixture(scope="session", autouse=True)
def _stop_mock_workers():
    yield
    workers.shutdown_workers()
