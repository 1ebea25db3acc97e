# Each target sets everything up first (idempotent, fast when nothing changed).
.PHONY: setup experiment test bench

setup:
	bash scripts/setup.sh

# piexp's default offline experiment: no account, no network.
experiment: setup
	.venv/bin/python -m piexp experiment=offline

test: setup
	.venv/bin/python -m pytest -q

bench: setup
	for b in bench/*.py; do .venv/bin/python $$b || exit 1; done
