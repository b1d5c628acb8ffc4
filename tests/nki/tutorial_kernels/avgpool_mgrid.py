"""2-D average pooling with the technique of the NKI average_pool2d tutorial (its nl.mgrid version,
https://awsdocs-neuron.readthedocs-hosted.com/en/latest/general/nki/tutorials/average_pool2d.html), written for this
project: the whole (channels, height, width) input is one SBUF tile with the channels on the partitions; nl.mgrid and
index arithmetic view it as (channel, out_row, row_in_window, out_col, col_in_window), nl.sum reduces the two
in-window axes [2, 4] (not the trailing ones, as avgpool_grid.py does), and the window sums are divided by the
window's element count, a Python int. The argument carries an nki.typing annotation."""

import neuronxcc.nki as nki
import neuronxcc.nki.language as nl
import neuronxcc.nki.typing as nt


@nki.jit
def pool_mean(image: nt.tensor, size):
    channels, height, width = image.shape
    out_rows, out_cols = height // size, width // size
    pooled = nl.ndarray((channels, out_rows, out_cols), dtype=image.dtype, buffer=nl.shared_hbm)
    pixels = nl.load(image)
    ch, row, dr, col, dc = nl.mgrid[0:channels, 0:out_rows, 0:size, 0:out_cols, 0:size]
    window_sums = nl.sum(pixels[ch, row * size + dr, col * size + dc], axis=[2, 4])
    nl.store(pooled, value=window_sums / (size * size))
    return pooled
