"""What runs inside a mock-cluster worker for the conformance corpus: real device tensors from a call's specs, then the
real ttnn op. Unlike the agreement battery's run_case it does not run the package's rules on the real tensors, so a
call the rules cannot describe still gets ttnn's verdict."""

from __future__ import annotations

from tests.mock import mock_cases, mock_worker


def _first_line(e: Exception) -> str:
    return f"{type(e).__name__}: {e}".split("backtrace:")[0].strip()


def ttnn_call(mesh, case: dict) -> dict:
    """ttnn's verdict on one corpus call: 'accept', or 'reject' with ttnn's message (building the inputs included)."""
    try:
        tensors = {k: mock_worker.build_tensor(mesh, case[k]) for k in mock_cases.TENSOR_SLOTS if case.get(k)}
    except Exception as e:  # ttnn refuses the layout itself (shard spec, dtype) before the op
        return {"verdict": "reject", "message": "building the inputs: " + _first_line(e)}
    try:
        mock_worker.call_ttnn(case, tensors, mock_cases.op_kwargs(case["kw"]))
    except Exception as e:
        return {"verdict": "reject", "message": _first_line(e)}
    return {"verdict": "accept", "message": ""}
