"""Transposes the (m, n) matrix flattened in each partition's row, with the API set of the NKI transpose2d tutorial:
a whole-tensor nl.load, a 3-D nl.mgrid giving each partition a 2-D access pattern, nl.copy between two SBUF views
whose index expressions swap the roles of the two free grid axes, and a whole-tensor nl.store."""

import neuronxcc.nki as nki
import neuronxcc.nki.language as nl


@nki.jit
def transpose_in_rows(x, shape2d):
    parts, width = x.shape
    m, n = shape2d
    y = nl.ndarray((parts, width), dtype=x.dtype, buffer=nl.shared_hbm)
    x_t = nl.load(x)
    ip, ia, ib = nl.mgrid[0:parts, 0:m, 0:n]
    y_t = nl.ndarray((parts, m * n), dtype=x.dtype)
    y_t[ip, ib * m + ia] = nl.copy(x_t[ip, ia * n + ib])
    nl.store(y, value=y_t)
    return y
