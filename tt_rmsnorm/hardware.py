"""Is a real Tenstorrent device here, or a mock cluster? The demo, the parity runner and the test fixtures ask the same
question; `MockClusterError` says a mock cluster cannot be set up here."""

import glob
import os

MOCK_ENV = "TT_METAL_MOCK_CLUSTER_DESC_PATH"


def tt_hardware_present() -> bool:
    """True when the kernel driver exposes a Tenstorrent device and no mock cluster was asked for."""
    return bool(glob.glob("/dev/tenstorrent/*")) and not os.environ.get(MOCK_ENV)


def mock_cluster_active() -> bool:
    return bool(os.environ.get(MOCK_ENV))


class MockClusterError(RuntimeError):
    """The mock cluster cannot be set up here (wrong environment, unknown system, conflicting process state)."""
