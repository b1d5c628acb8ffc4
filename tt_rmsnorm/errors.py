"""The error every port raises for bad input, and the warning for accepted but lossy options.

Imports nothing beyond the standard library, so the Triton and NKI ports raise the same `RuleError` on hosts without
ttnn.
"""


class RuleError(ValueError):
    """A violated rule: `rule` (stable id), `seen` (the offending value) and `fix` (what to do)."""

    def __init__(self, rule: str, message: str, seen, fix: str):
        self.rule, self.seen, self.fix = rule, seen, fix
        super().__init__(f"[{rule}] {message}; got {seen}. Fix: {fix}")


class AccuracyWarning(UserWarning):
    """A requested option is accepted but known to lose accuracy."""
