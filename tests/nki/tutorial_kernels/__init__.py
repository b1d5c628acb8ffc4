"""Project-written NKI kernels that exercise the API sets and limits of AWS's public NKI tutorials (rmsnorm,
layernorm, softmax, tensor_add with an SPMD grid, transpose2d, average_pool2d, matmul), each written from the
algorithm and the API documentation; each module names the tutorial whose technique it follows. No AWS code is kept
here. They are source files loaded by tests/nki/test_nki_tutorial_conformance.py under the emulator, in the spelling
their imports name (or, for the project's nki.language-only ones, in both spellings)."""
