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

test: setup
	.venv/bin/python -m pytest -q --durations=25 --durations-file=$(TEST_DURATIONS)

bench: setup
	for b in bench/*.py; do .venv/bin/python $$b || exit 1; done

# The documentation site (mkdocs.yml, sources in docs/), built strictly: a broken link
# or an undocumented config key fails the build. Open site/index.html.
docs: setup
	NO_MKDOCS_2_WARNING=1 .venv/bin/python -m mkdocs build --strict --site-dir site
