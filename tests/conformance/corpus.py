"""tt-metal's own RMSNorm tests as data: every parameter set of the rmsnorm cases of its test files, as the calls each
one makes per device, and what the tt-metal test asserts about it.

`ENTRIES` is the corpus in source order: `corpus_fused` (tests/ttnn/.../fused/) then `corpus_eager_and_models`
(tests/tt_eager/ and DeepSeek-V3's unit test). What an entry holds, and the builders the sections share, are in
`corpus_format`. Facts only: parameter values, not test code.
"""

from __future__ import annotations

from tests.conformance import corpus_eager_and_models, corpus_fused

ENTRIES: list[dict] = corpus_fused.ENTRIES + corpus_eager_and_models.ENTRIES

assert len({e["id"] for e in ENTRIES}) == len(ENTRIES), "duplicate entry ids"
