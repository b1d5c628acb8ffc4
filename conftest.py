"""Root fixtures in tt-metal style: `device` and `mesh_device` (indirect mesh shapes), plus hardware markers.

    @pytest.mark.parametrize("mesh_device", [(1, 8), (8, 4)], ids=["t3k_1x8", "galaxy_8x4"], indirect=True)
    def test_x(mesh_device): ...

The fixtures open real hardware when it is present, a mock cluster when the process was started as a mock-cluster
case (see tt_rmsnorm.testing.mock_cluster), and otherwise skip with the reason.
"""

import gc
import importlib.util

import pytest

from tt_rmsnorm.hardware import mock_cluster_active, tt_hardware_present

NO_TT = "no Tenstorrent hardware here (mock-cluster cases run through tests/mock in their own processes)"


def _cuda_count() -> int:
    """CUDA GPUs visible to torch (a dependency): no driver gives 0; any other error surfaces, not hidden as 0 GPUs."""
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def pytest_collection_modifyitems(config, items):
    have_tt = tt_hardware_present() or mock_cluster_active()
    n_cuda = _cuda_count()
    have_neuron = importlib.util.find_spec("neuronxcc") is not None
    for item in items:
        if "requires_tt_hardware" in item.keywords and not tt_hardware_present():
            item.add_marker(pytest.mark.skip(reason="needs real Tenstorrent hardware: " + NO_TT))
        if "requires_cuda" in item.keywords and n_cuda == 0:
            item.add_marker(
                pytest.mark.skip(reason="needs a CUDA GPU; the same cases run on CPU under TRITON_INTERPRET=1")
            )
        if "requires_multi_gpu" in item.keywords and n_cuda < 2:
            item.add_marker(pytest.mark.skip(reason=f"needs >= 2 CUDA GPUs, found {n_cuda}"))
        if "requires_neuron" in item.keywords and not have_neuron:
            item.add_marker(pytest.mark.skip(reason="needs the NKI toolchain (neuronxcc); the emulator cases cover CI"))
        if (
            "device" in getattr(item, "fixturenames", ()) or "mesh_device" in getattr(item, "fixturenames", ())
        ) and not have_tt:
            item.add_marker(pytest.mark.skip(reason=NO_TT))


def pytest_collection_finish(session):
    """The modules and the collected tests live for the whole session: frozen out of the garbage collector's scans,
    every later collection looks only at what tests create (torch, ttnn and Triton make the frozen part large)."""
    gc.collect()
    gc.freeze()


@pytest.fixture(scope="function")
def mesh_device(request):
    """A MeshDevice of shape request.param (default (1, 1)), closed after the test."""
    from tt_rmsnorm.devices import close_mesh
    from tt_rmsnorm.testing.mock_cluster import open_mesh

    mesh_device = open_mesh(tuple(getattr(request, "param", (1, 1))))
    yield mesh_device
    close_mesh(mesh_device)


@pytest.fixture(scope="function")
def device():
    """A single device (a 1x1 mesh), as tt-metal's `device` fixture."""
    from tt_rmsnorm.devices import close_mesh
    from tt_rmsnorm.testing.mock_cluster import open_mesh

    mesh_device = open_mesh((1, 1))
    yield mesh_device
    close_mesh(mesh_device)
