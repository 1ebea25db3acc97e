#!/usr/bin/env bash
# Re-record the golden episodes that tests/launch/test_golden.py replays on every suite run:
#   tests/golden/check          every family x Python and JavaScript, each scripted policy
#                               (oracle, guess, crash, wrong, edit);
#   tests/golden/pi_check       the same through the real Pi (harness=pi; `make setup`
#                               installs it): arith and dates x Python and JavaScript;
#   tests/golden/learner_local  (with --learner-local) a small eval of model=learner-local on
#                               experiment=learn_offline's tasks: real model turns, passing
#                               and failing programs (builds the model first if this machine
#                               has none: about 14 minutes);
#   tests/golden/learner_local_train  (with --learner-local) the last iteration of an RL run of
#                               experiment=learn_offline (seed 1): the episodes training
#                               recorded, malformed tool calls among them (about 6 minutes).
#   tests/golden/learner_local_pi_train  (with --learner-local-pi) the last iteration of an RL
#                               run in Pi of model=learner-local-pi (experiment=learn_offline,
#                               seed 4): the model's own turns through Pi (builds the model
#                               first if this machine has none: about 30 minutes; the run
#                               about 10).
# Run it after a deliberate change to what an episode earns, then review the diff of
# tests/golden/ like code: `python -m piexp replay tests/golden/check` before
# regenerating says which episodes change and how.
set -euo pipefail
cd "$(dirname "$0")/.."
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# record_check NAME OVERRIDE...: a check run of one task per cell, kept as tests/golden/NAME.
record_check() {
  local name=$1
  shift
  .venv/bin/python -m piexp mode=check "$@" 'lang=[python,javascript]' \
    mode.oracle_tasks_per_cell=1 mode.sample_tasks_per_cell=1 \
    tasks.train_per_family=1 tasks.eval_per_family=1 hydra.run.dir="$tmp/$name"
  rm -rf "tests/golden/$name"
  mkdir -p "tests/golden/$name/.hydra"
  cp "$tmp/$name/.hydra/config.yaml" "$tmp/$name/.hydra/overrides.yaml" "tests/golden/$name/.hydra/"
  cp "$tmp/$name/manifest.json" "$tmp/$name/check.json" "$tmp/$name/check_transcripts.jsonl.gz" "tests/golden/$name/"
  echo "re-recorded tests/golden/$name"
}
# keep_last_iteration NAME: a training run's config, manifest and last iteration's episodes,
# kept as tests/golden/NAME.
keep_last_iteration() {
  local name=$1
  rm -rf "tests/golden/$name"
  mkdir -p "tests/golden/$name/.hydra"
  cp "$tmp/$name/.hydra/config.yaml" "$tmp/$name/.hydra/overrides.yaml" "tests/golden/$name/.hydra/"
  cp "$tmp/$name/manifest.json" "tests/golden/$name/"
  .venv/bin/python -c 'import gzip, json, sys
rows = gzip.open(sys.argv[1], "rt").readlines()
last = max(json.loads(row)["iteration"] for row in rows)
gzip.open(sys.argv[2], "wt").writelines(row for row in rows if json.loads(row)["iteration"] == last)' \
    "$tmp/$name/train_transcripts.jsonl.gz" "tests/golden/$name/train_transcripts.jsonl.gz"
  echo "re-recorded tests/golden/$name"
}
record_check check family=all
record_check pi_check harness=pi 'family=[arith,dates]'
if [[ "${1:-}" == "--learner-local" ]]; then
  .venv/bin/python -m piexp experiment=learn_offline mode=eval policy=model tasks.eval_per_family=4 k=2 \
    hydra.run.dir="$tmp/learner_local"
  rm -rf tests/golden/learner_local
  mkdir -p tests/golden/learner_local/.hydra
  cp "$tmp"/learner_local/.hydra/config.yaml "$tmp"/learner_local/.hydra/overrides.yaml tests/golden/learner_local/.hydra/
  # The model's episodes only (the run's preflight check is the scripted policies' golden above).
  cp "$tmp"/learner_local/manifest.json "$tmp"/learner_local/episodes.jsonl \
    "$tmp"/learner_local/transcripts.jsonl.gz tests/golden/learner_local/
  echo "re-recorded tests/golden/learner_local"
  .venv/bin/python -m piexp experiment=learn_offline seed=1 mode.eval_before=false mode.eval_after=false \
    hydra.run.dir="$tmp/learner_local_train"
  keep_last_iteration learner_local_train
fi
if [[ "${1:-}" == "--learner-local-pi" ]]; then
  .venv/bin/python -m piexp experiment=learn_offline harness=pi harness.options.wall_time_s=600 \
    model=learner-local-pi seed=4 mode.eval_before=false mode.eval_after=false \
    hydra.run.dir="$tmp/learner_local_pi_train"
  keep_last_iteration learner_local_pi_train
fi
echo "review: git diff --stat tests/golden"
