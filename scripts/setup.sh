#!/usr/bin/env bash
# Idempotent set-up: system packages, a virtual environment in .venv, piexp with its
# test and slurm extras (the cluster tests run sweeps through submitit's local executor).
# Fast when nothing changed (a stamp keyed to pyproject.toml).
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3.11}
command -v "$PYTHON" >/dev/null 2>&1 || PYTHON=python3

# bubblewrap isolates sandboxed programs (and a C compiler builds the sandbox's zygote,
# piexp/sandbox/launchers/zygote.c); node runs the JavaScript tasks; Chromium (and its driver)
# runs the run viewer's browser test (tests/transcripts/test_viewer_browser.py).
missing=()
command -v bwrap >/dev/null 2>&1 || missing+=(bubblewrap)
command -v cc >/dev/null 2>&1 || command -v gcc >/dev/null 2>&1 || missing+=(gcc libc6-dev)
command -v node >/dev/null 2>&1 || missing+=(nodejs)
# npm installs the Pi coding agent (harness=pi) from the committed lockfile, below.
command -v npm >/dev/null 2>&1 || missing+=(npm)
# libseccomp compiles the sandbox's syscall filter (loaded with ctypes: no headers needed).
ldconfig -p 2>/dev/null | grep -q "libseccomp.so.2 " || missing+=(libseccomp2)
# tcmalloc is the allocator of the local SkyRL server and the learner build's fit (piexp/allocator.py).
ldconfig -p 2>/dev/null | grep -q "libtcmalloc_minimal.so.4 " || missing+=(libtcmalloc-minimal4)
command -v git >/dev/null 2>&1 || missing+=(git)
command -v chromium >/dev/null 2>&1 || missing+=(chromium)
command -v chromedriver >/dev/null 2>&1 || missing+=(chromium-driver)
if [ ${#missing[@]} -gt 0 ]; then
  if [ "$(id -u)" -eq 0 ]; then SUDO=""; else SUDO="sudo"; fi
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq "${missing[@]}"
fi

stamp=.venv/.piexp-setup-$(sha256sum pyproject.toml | cut -c1-16)
if [ ! -f "$stamp" ]; then
  [ -x .venv/bin/python ] || "$PYTHON" -m venv .venv
  .venv/bin/python -m pip install -q --upgrade pip
  # torch first, pinned: 2.13.0 resolves to the local CPU wheel (about 1.6 GB) instead of
  # a 6 GB CUDA build; tinker-cookbook needs torch but piexp never runs it on a GPU here.
  .venv/bin/python -m pip install -q "torch==2.13.0"
  .venv/bin/python -m pip install -q -e ".[test,slurm,ray]"
  rm -f .venv/.piexp-setup-*
  touch "$stamp"
fi

# Harbor's own code checks the task folders and ATIF trajectories piexp exports
# (tests/harbor): harbor 0.25.0 needs Python 3.12, so it gets a venv of its own,
# .venv-harbor, where a python3.12 exists (elsewhere those checks skip, saying so; the
# same rules written out in tests/harbor still run). Only the modules they load are
# needed: harbor without its dependencies, then pydantic, toml and pathspec.
PYTHON312=""
for candidate in python3.12 "${PYENV_ROOT:-$HOME/.pyenv}"/versions/3.12*/bin/python3.12; do
  if "$candidate" -c "" >/dev/null 2>&1; then PYTHON312=$candidate; break; fi  # a pyenv shim may name none
done
if [ -n "$PYTHON312" ] && [ ! -f .venv-harbor/.harbor-0.25.0 ]; then
  rm -rf .venv-harbor
  if "$PYTHON312" -m venv .venv-harbor \
    && .venv-harbor/bin/python -m pip install -q --no-deps "harbor==0.25.0" \
    && .venv-harbor/bin/python -m pip install -q --no-warn-conflicts "pydantic>=2.6" "toml" "pathspec"; then
    touch .venv-harbor/.harbor-0.25.0
  else
    echo "set-up: continuing; the tests check exports against Harbor's rules only (no Harbor venv)" >&2
  fi
fi

# The sandbox's zygote, compiled once per source version into ~/.cache/piexp (instant
# when it is there; otherwise the first server start would compile it).
.venv/bin/python -m piexp.sandbox build-zygote || echo "set-up: continuing; the sandbox starts a bwrap per run instead" >&2

# harness=pi: the Pi coding agent and the node 22 it needs, from the npm registry with the
# committed lockfile (piexp/harness/pi/npm/), into piexp's cache; a no-op when installed
# (about 28 s the first time here). Runs never install anything.
if command -v npm >/dev/null 2>&1; then
  .venv/bin/python -m piexp.harness.pi install || echo "set-up: continuing; harness=pi needs Pi (python -m piexp.harness.pi install)" >&2
else
  echo "set-up: npm is missing, so harness=pi cannot be installed (apt-get install npm)" >&2
fi
