"""The agreement battery: every case of the tables (mock_cases_norm, mock_cases_gather on Wormhole, mock_cases_blackhole
on Blackhole), grouped by system so the session's worker processes (at most MAX_WORKERS alive) are started once each."""

from tests.mock import mock_cases_blackhole, mock_cases_gather, mock_cases_norm
from tests.mock.mock_cases import GRIDS
from tt_rmsnorm.testing.mock_cluster import ARCHES

CASES: list[dict] = sorted(
    mock_cases_norm.CASES + mock_cases_gather.CASES + mock_cases_blackhole.CASES,
    key=lambda c: list(GRIDS).index(c["system"]),
)


def architecture_of(case: dict) -> str:
    return ARCHES[case["system"]]


def in_make_test(case: dict) -> bool:
    """Every Wormhole case; of the Blackhole ones those mock_cases_blackhole.in_make_test names."""
    return architecture_of(case) != "blackhole" or mock_cases_blackhole.in_make_test(case)


# Cases where the package's verdict differs from ttnn's, reported to the rules' owner. The battery marks them as strict
# expected failures, so each one turns the battery red again as soon as the rule is fixed (then drop it from here).
KNOWN_DISAGREEMENTS: dict[str, str] = {}

assert len({c["id"] for c in CASES}) == len(CASES), "duplicate case ids"
