"""How a planned call reaches ttnn's ops: through the function each op's Python wrapper calls, where the wrapper
would do nothing else.

ttnn's op objects (`ttnn.decorators.FastOperation`) check on every call whether the slow runtime is on (fast runtime
mode off, comparison mode, logging), whether Python graph recording is on, and whether a queue id was passed; with
none of these the wrapper only calls its `function`, and those checks cost about 4 us an op on the host. A planned
call passes no queue id, so it checks the rest once per call (`route`) and then calls each op's function itself. Where
any of them is on, or the op is not ttnn's own wrapper (a recording or profiling hook replaced it on the module), every
op goes through the object on the `ttnn` module, so ttnn's reports and graph capture see each call as model code
makes it.
"""

from __future__ import annotations

import ttnn
from ttnn import decorators, graph
from ttnn.decorators import FastOperation

# ttnn wraps the op call for trace allocation tracking when its environment asks for it (the wrapper then does work of
# its own on every call), and a profiler may wrap it later: either way the call is no longer the plain one.
_PLAIN_CALL = None if getattr(decorators, "TRACE_ALLOC_TRACKING", False) else FastOperation.__call__


def passes_through() -> bool:
    """Whether ttnn's op wrapper would only call the op's function now."""
    config = ttnn.CONFIG
    return (
        FastOperation.__call__ is _PLAIN_CALL
        and config.enable_fast_runtime_mode
        and not config.enable_comparison_mode
        and not config.enable_logging
        and not graph.is_python_io_recording_enabled()
    )


def _function(op):
    return op.function if type(op) is FastOperation else op


def _wrapper(op):
    return op


def route():
    """`via(op)` for one planned call: the function ttnn's wrapper of `op` would call, where the wrapper would pass the
    call through, else `op` itself. Used as `via(ttnn.rms_norm)(x, ...)`, reading `ttnn.rms_norm` at the call."""
    return _function if passes_through() else _wrapper
