"""The Triton and Gluon kernels of the RMSNorm port, a module a kernel family, and the device functions they share.

    forward.py          rows (whole rows in registers), looped (rows streamed in chunks), the row sum of squares
    forward_split.py    split: a row shared by co-resident programs that exchange partials through global memory
    forward_cluster.py  cluster (Gluon): a row a thread-block cluster, partials exchanged in distributed shared memory
    forward_async.py    async (Gluon): whole rows copied into shared memory by cp.async
    backward.py         rows, cols, decode and split backwards, and the sum of the weight-gradient partials
    row_io.py           loads, stores, residual sum, FP8 quantization: what every kernel does to a row
    row_stats.py        rstd, the second pass of rows past fp32's range, the FP8 row max
    split_exchange.py   the split kernels' flagged exchange words
    cluster_exchange.py the cluster kernel's exchange, as PTX
    cluster_staging.py  how the cluster kernel lays a row out over its CTAs and shared memory

The launchers that pick and start them are ../forward.py and ../backward.py; the fused all-reduce's kernels are
../allreduce/.
"""
