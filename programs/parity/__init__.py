"""The cross-hardware parity runner: one seeded input set (cases.py) through every backend on the machine
(backends.py), judged by tt_rmsnorm.accuracy, reported as tables, CSV, markdown and a plot (report.py).
Entry point: `tt-rmsnorm-parity` (runner.main); the demo's closing summary: summary.print_demo_summary()."""
