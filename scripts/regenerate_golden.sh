#!/usr/bin/env bash
# Re-record the golden episodes that tests/launch/test_golden.py replays on every suite run
# (every family x Python and JavaScript, each scripted policy: oracle, guess, crash, wrong,
# edit). Run it after a deliberate change to what an episode earns, then review the diff
# of tests/golden/ like code: `python -m piexp replay tests/golden/check` before
# regenerating says which episodes change and how.
set -euo pipefail
cd "$(dirname "$0")/.."
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
.venv/bin/python -m piexp mode=check family=all 'lang=[python,javascript]' \
  mode.oracle_tasks_per_cell=1 mode.sample_tasks_per_cell=1 \
  tasks.train_per_family=1 tasks.eval_per_family=1 hydra.run.dir="$tmp/check"
rm -rf tests/golden/check
mkdir -p tests/golden/check/.hydra
cp "$tmp"/check/.hydra/config.yaml "$tmp"/check/.hydra/overrides.yaml tests/golden/check/.hydra/
cp "$tmp"/check/manifest.json "$tmp"/check/check.json "$tmp"/check/check_transcripts.jsonl.gz tests/golden/check/
echo "re-recorded tests/golden/check; review: git diff --stat tests/golden"
