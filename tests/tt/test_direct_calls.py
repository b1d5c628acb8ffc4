"""Which route a planned call takes to ttnn's ops, without a device: the wrapped function where ttnn's wrapper would do
nothing else, the wrapper itself wherever ttnn's slow runtime, logging, comparison mode or Python graph recording is
on, or the op on the module is not ttnn's wrapper."""

import pytest
import ttnn

from tt_rmsnorm import direct_calls


def test_with_ttnn_s_defaults_an_op_is_called_through_its_function():
    assert direct_calls.passes_through()
    via = direct_calls.route()
    assert via(ttnn.rms_norm) is ttnn.rms_norm.function
    assert via(ttnn.experimental.all_gather_async) is ttnn.experimental.all_gather_async.function


def test_an_op_that_is_not_ttnn_s_wrapper_is_called_as_it_is():
    def hooked(*args, **kwargs):  # what a recording or profiling hook puts on the ttnn module
        return None

    assert direct_calls.route()(hooked) is hooked


@pytest.mark.parametrize(
    "setting, value",
    [("enable_fast_runtime_mode", False), ("enable_logging", True), ("enable_comparison_mode", True)],
)
def test_any_setting_that_gives_the_wrapper_work_routes_through_it(setting, value):
    before = getattr(ttnn.CONFIG, setting)
    setattr(ttnn.CONFIG, setting, value)
    try:
        assert not direct_calls.passes_through()
        assert direct_calls.route()(ttnn.rms_norm) is ttnn.rms_norm
    finally:
        setattr(ttnn.CONFIG, setting, before)
    assert direct_calls.passes_through()


def test_python_graph_recording_routes_through_the_wrapper():
    ttnn.graph.enable_python_io_recording()
    try:
        assert direct_calls.route()(ttnn.rms_norm) is ttnn.rms_norm
    finally:
        ttnn.graph.disable_python_io_recording()
    assert direct_calls.route()(ttnn.rms_norm) is ttnn.rms_norm.function


def test_a_replaced_op_call_routes_through_the_wrapper(monkeypatch):
    from ttnn.decorators import FastOperation

    plain = FastOperation.__call__

    def tracked(self, *args, **kwargs):  # ttnn's trace-allocation tracking wraps the call like this
        return plain(self, *args, **kwargs)

    monkeypatch.setattr(FastOperation, "__call__", tracked)
    assert not direct_calls.passes_through()
