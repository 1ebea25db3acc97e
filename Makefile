# Each target sets everything up first (idempotent, fast when nothing changed).
.PHONY: setup experiment test bench docs

setup:
	bash scripts/setup.sh

# piexp's default offline experiment: no account, no network.
experiment: setup
	.venv/bin/python -m piexp experiment=offline

# The 25 slowest tests of the last `make test` (pytest --durations=25), to keep the
# suite fast as it grows: a test over 30 s says why in its docstring.
TEST_DURATIONS := test-durations.txt
# Parallel test workers, each taking whole test files (their module fixtures build runs
# once): one more than the cores, since tests also wait on the runs, servers and sandboxes
# they start; at most 4. The files are handed out in collection order, slow tests first
# (tests/conftest.py), not pytest-xdist's default of the files with most tests first.
TEST_WORKERS ?= $(shell n=$$(nproc); [ $$n -gt 3 ] && n=3; echo $$((n + 1)))

test: setup
	.venv/bin/python -m pytest -q -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder --durations=25 --durations-file=$(TEST_DURATIONS)

# Each bench appends its figures to bench/results/NAME.jsonl; bench/report.py then writes
# docs/benchmarks.md from the latest record of each (machine_cpu.py and record.py are
# the benches' shared code, not benches).
bench: setup
	for b in bench/*.py; do case $$b in bench/machine_cpu.py|bench/record.py|bench/report.py) continue;; esac; 		.venv/bin/python $$b || exit 1; done
	.venv/bin/python bench/report.py

# The documentation site (mkdocs.yml, sources in docs/), built strictly: a broken link
# or an undocumented config key fails the build. Open site/index.html.
docs: setup
	NO_MKDOCS_2_WARNING=1 .venv/bin/python -m mkdocs build --strict --site-dir site
