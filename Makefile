# The two commands of the README: `make demo` (the main job) and `make test`; `make conformance` runs tt-metal's own
# RMSNorm test parameter sets through the package and ttnn on mock clusters (tests/conformance) and prints the table;
# `make multihost` runs meshes that span hosts under ttnn's tt-run (tests/multihost), Galaxies included.
# Each sets itself up: a .venv built from a Python 3.12 (see .ci/find-python), the project installed editable.
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
PYTEST_ARGS ?=
# Two test processes (this project's CI has two cores); each runs its own mock-cluster workers.
PYTEST_WORKERS ?= 2

.PHONY: demo test extended battery conformance parity bench-host mutation fuzz fuzz-rules multihost mpi clean-venv

$(STAMP): pyproject.toml
	@set -e; if [ ! -x $(PY) ]; then \
	  base=$$(.ci/find-python); echo "creating $(VENV) with $$base"; $$base -m venv $(VENV); fi
	@# torch's CUDA build and its nvidia libraries take ~6 GB in the venv, plus ~3 GB of wheels while pip installs them;
	@# no wheel cache, so that a fresh machine needs no more than that.
	@df -h . $${TMPDIR:-/tmp} | sed 's/^/disk: /'
	$(PY) -m pip install -q --no-cache-dir --upgrade pip
	$(PY) -m pip install -q --no-cache-dir -e '.[test]'
	@touch $(STAMP)

demo: $(STAMP)
	PYTHONUNBUFFERED=1 $(PY) demos/distributed_rmsnorm.py

# tt-run launches the ranks of a mesh that spans hosts with mpirun: Debian's openmpi-bin, installed here where apt-get
# can (as root); elsewhere the multihost tests skip and say why.
mpi:
	@command -v mpirun >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    echo "installing openmpi-bin for tt-run"; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq openmpi-bin >/dev/null; \
	  else echo "no mpirun and no apt-get as root: the multihost tests will skip"; fi; }

# The two T3000 hosts of tests/multihost run here; the dual and quad Galaxies (about a minute more) in `make multihost`.
# The batteries' Blackhole repeats run here in a stable share (their own cases, every verdict that differs from
# Wormhole's, every package-only guard, an eighth of the rest); `make battery` runs the rest of them (about 5 minutes).
test: $(STAMP) mpi
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .
	$(PY) -m pytest -n $(PYTEST_WORKERS) -m "not multihost_galaxy and not full_battery and not extended" $(PYTEST_ARGS)

# The 4- and 8-rank gloo runs (each rank a process importing torch and Triton: about a minute more on two cores).
extended: $(STAMP)
	$(PY) -m pytest -n $(PYTEST_WORKERS) -m extended $(PYTEST_ARGS)

battery: $(STAMP)
	$(PY) -m pytest -n $(PYTEST_WORKERS) -m full_battery tests/mock $(PYTEST_ARGS)

multihost: $(STAMP) mpi
	PYTHONUNBUFFERED=1 $(PY) -m pytest -v -s tests/multihost $(PYTEST_ARGS)

bench-host: $(STAMP)
	PYTHONUNBUFFERED=1 $(PY) -m benchmarks.host

conformance: $(STAMP)
	PYTHONUNBUFFERED=1 $(PY) -m tools.conformance

parity: $(STAMP)
	$(VENV)/bin/tt-rmsnorm-parity

# Mutation testing, one module or all (MODULE=accuracy|reference|rules|l1_budget|layouts|topology|triton|paths|planner|
# ccl|module), SAMPLE mutants each drawn with SEED (SAMPLE=0: every mutant; a full rules run is hours on two cores).
# Prints the score per module and the survivors (tools/mutation/README.md).
MODULE ?=
SAMPLE ?= 60
SEED ?= 0
mutation: $(STAMP)
	@$(PY) -c 'import cosmic_ray' 2>/dev/null || $(PY) -m pip install -q --no-cache-dir -e '.[mutation]'
	$(PY) tools/mutation/run.py --sample $(SAMPLE) --seed $(SEED) $(MODULE)
# Differential fuzzing of the rules against ttnn on mock clusters: N generated calls (the norm ops, all_gather,
# fused_rms_minimal, all_gather_async and their compositions, inputs of every dtype ttnn describes), a fresh seed unless
# TT_RMSNORM_FUZZ_SEED is set; prints every failing call as a battery case, then the agreement per op and per input
# dtype and the calls the package accepts and ttnn refuses. `make test` runs a fixed-seed sample of 150.
N ?= 1000
fuzz: $(STAMP)
	PYTHONUNBUFFERED=1 $(PY) -m tools.differential $(N)
# The checkers' totality without devices (tests/tt/test_rule_totality.py): N fresh hypothesis examples for each check
# entry point, path plan and the planner, every one accepted or refused with a RuleError; a failure prints its
# smallest example and the blob that reproduces it. `make test` runs a fixed sample of 300 each.
fuzz-rules: $(STAMP)
	TT_RMSNORM_RULE_EXAMPLES=$(N) $(PY) -m pytest -q -p no:cacheprovider tests/tt/test_rule_totality.py

clean-venv:
	rm -rf $(VENV)
