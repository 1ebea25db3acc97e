"""Training runs record the episodes they train on: the train dataset piexp gives the
cookbook wraps each group so that, once graded, its trajectories' transcripts (iteration
and group included) go to `train_transcripts.jsonl.gz`; `show`'s reader, `rescore` and
`replay` read them. Real workspace envs, the real sandbox and the cookbook's own group
rollout, with the scripted `wrong` policy in place of a sampled model; a resumed run
drops and re-records the iterations from where it restarted."""

from __future__ import annotations

import asyncio
import json
import shutil
from pathlib import Path

import yaml
from tinker_cookbook.completers import TokenCompleter, TokensWithLogprobs
from tinker_cookbook.rl.rollouts import do_group_rollout

from piexp.commands.replay import main as replay
from piexp.commands.rescore import main as rescore
from piexp.config.compose import load
from piexp.env.episode import get_run_renderer
from piexp.env.splits import build_splits
from piexp.launch.check import run_check
from piexp.launch.manifest import build_manifest, write_manifest
from piexp.launch.train import cookbook_config
from piexp.launch.train_transcripts import TrainRecorder
from piexp.policies import make_policy
from piexp.sandbox.client import close_sandbox_clients
from piexp.transcripts.runs import load_run
from piexp.transcripts.store import TRAIN_TRANSCRIPTS, read_transcripts

OVERRIDES = ["mode=train", "family=arith", "lang=python", "mode.group_size=2", "mode.groups_per_batch=2",
             "tasks.train_per_family=2", "tasks.eval_per_family=1"]  # fmt: skip


class CutAtTheTokenLimit(TokenCompleter):
    """Test fixture standing in for a model whose first turn reaches the generation limit:
    the `wrong` policy's first tokens, stopped with "length" as the sampler reports a turn
    cut at max_tokens (the env then ends the episode ungraded, reward -0.1)."""

    def __init__(self, inner: TokenCompleter) -> None:
        self.inner = inner

    async def __call__(self, model_input, stop, *, max_tokens=None):
        sampled = await self.inner(model_input, stop, max_tokens=max_tokens)
        tokens = sampled.tokens[:8]
        return TokensWithLogprobs(tokens=tokens, maybe_logprobs=[0.0] * len(tokens), stop_reason="length")


class StartsWithAnUnnormalizedCharacter(TokenCompleter):
    """Test fixture standing in for a model whose turns begin with the UTF-8 bytes of a CJK
    compatibility ideograph (U+F9E4), as byte-level tokens: their text is not in NFC, and
    tokenizing it again gives the normalized ideograph (U+7406) instead."""

    def __init__(self, inner: TokenCompleter, renderer) -> None:
        self.inner = inner
        self.prefix = renderer.tokenizer.convert_tokens_to_ids(["ï", "§", "¤"])  # bytes EF A7 A4, byte-level BPE
        assert renderer.tokenizer.decode(self.prefix) == "\uf9e4"

    async def __call__(self, model_input, stop, *, max_tokens=None):
        sampled = await self.inner(model_input, stop, max_tokens=max_tokens)
        tokens = [*self.prefix, *sampled.tokens]
        return TokensWithLogprobs(tokens=tokens, maybe_logprobs=[0.0] * len(tokens), stop_reason=sampled.stop_reason)


def _train_folder(
    run: Path, sandbox_url: str, iterations: range, *, cut: bool = False, unnormalized: bool = False
) -> None:
    """What a training run leaves of its episodes: its .hydra record, manifest and the
    transcripts of `iterations` batches played through the cookbook's group rollout (with
    `cut`, every episode's first turn is cut at the token limit; with `unnormalized`, every
    turn's text begins with a character that is not in NFC)."""
    config = load(OVERRIDES)
    (run / ".hydra").mkdir(parents=True, exist_ok=True)
    (run / ".hydra" / "config.yaml").write_text(yaml.safe_dump(config.model_dump(mode="json")))
    (run / ".hydra" / "overrides.yaml").write_text(yaml.safe_dump(OVERRIDES))
    splits = build_splits(config)
    write_manifest(run, build_manifest(seed=config.seed, task_digests=splits.digests(), overlap_report={}))
    train_config = cookbook_config(config, run, sandbox_url)
    renderer = get_run_renderer(config.model.renderer or "qwen3_instruct", config.model.name)
    policy = make_policy("wrong", renderer, [*splits.train, *splits.eval])
    if cut:
        policy = CutAtTheTokenLimit(policy)
    if unnormalized:
        policy = StartsWithAnUnnormalizedCharacter(policy, renderer)

    async def play() -> None:
        try:
            train, _ = await train_config.dataset_builder()
            for index in iterations:
                for builder in train.get_batch(index):
                    await do_group_rollout(builder, policy)
        finally:
            await close_sandbox_clients()
            TrainRecorder.close(str(run / TRAIN_TRANSCRIPTS))

    asyncio.run(play())


def test_a_training_run_records_its_episodes_and_rescore_and_replay_read_them(sandbox_url, tmp_path):
    run = tmp_path / "train"
    _train_folder(run, sandbox_url, range(2))
    transcripts = list(read_transcripts(run / TRAIN_TRANSCRIPTS))
    assert len(transcripts) == 2 * 2 * 2  # iterations x groups x group size
    assert sorted({(t["iteration"], t["group"]) for t in transcripts}) == [(0, 0), (0, 1), (1, 0), (1, 1)]
    assert all(t["policy"] == "model" and t["trained_reward"] == t["shaped"] == 0.3 for t in transcripts)
    assert all(t["reward"] == 0.0 and t["expected"] for t in transcripts)

    view = load_run(run)
    assert [row["source"] for row in view.rows] == ["train"] * 8 and len(view.transcripts) == 8

    assert rescore([str(run), "reward.weights.mutation=0.2", "--out", str(tmp_path / "rescore")]) == 0
    report = json.loads((tmp_path / "rescore" / "rescore.json").read_text())
    assert report["reproduced"] == 8 and abs(report["settings"][0]["mean"] - 0.35) < 1e-9
    assert len(report["settings"][0]["groups"]) == 4, "a group per iteration and group, not per task"

    assert replay([str(run), "--out", str(tmp_path / "replay")]) == 0


def test_a_resumed_run_records_the_iterations_from_its_restart_again(sandbox_url, tmp_path):
    run = tmp_path / "train"
    _train_folder(run, sandbox_url, range(3))
    before = list(read_transcripts(run / TRAIN_TRANSCRIPTS))
    _train_folder(run, sandbox_url, range(1, 3))  # restarted from the checkpoint of iteration 1
    after = list(read_transcripts(run / TRAIN_TRANSCRIPTS))
    key = [(t["iteration"], t["group"], t["sample"]) for t in after]
    assert len(key) == len(set(key)) == len(before) == 12, "no iteration twice, none lost"
    assert [t for t in after if t["iteration"] == 0] == [t for t in before if t["iteration"] == 0]
    shutil.rmtree(run)


def test_rescore_and_replay_of_a_training_run_read_its_training_episodes_not_its_preflight(sandbox_url, tmp_path):
    """A training run also holds its preflight check's episodes: rescore read those instead
    of the episodes it trained on, and said nothing of it; `--source` chooses, and the
    output names which and how many."""
    run = tmp_path / "train"
    _train_folder(run, sandbox_url, range(1))
    config = load(OVERRIDES)
    run_check(config, run, sandbox_url, build_splits(config))
    checked = [t for t in read_transcripts(run / "check_transcripts.jsonl.gz") if "task_id" in t]
    assert checked, "the preflight recorded its episodes"

    assert rescore([str(run), "--out", str(tmp_path / "rescore")]) == 0
    report = json.loads((tmp_path / "rescore" / "rescore.json").read_text())
    assert (report["source"], report["episodes"], report["reproduced"]) == ("train", 4, 4)
    assert rescore([str(run), "--source", "check", "--out", str(tmp_path / "rescore-check")]) == 0
    report = json.loads((tmp_path / "rescore-check" / "rescore.json").read_text())
    assert (report["source"], report["episodes"]) == ("check", len(checked))

    assert replay([str(run), "0", "1", "--out", str(tmp_path / "replay")]) == 0
    report = json.loads((tmp_path / "replay" / "replay.json").read_text())
    assert (report["source"], report["episodes"], report["identical"]) == ("train", 2, 2)
    assert {o["policy"] for o in report["outcomes"]} == {"model"}, "training episodes, not the check's policies"


def test_a_turn_cut_at_the_token_limit_replays_identically(sandbox_url, tmp_path):
    """A training episode whose turn hit max_tokens ends ungraded (stop max_tokens, reward
    -0.1). Replay rendered the cut turn as a finished one: the env parsed it, ran its tool
    call and graded the episode 0.0 ("completed"), a difference that was not there."""
    run = tmp_path / "train"
    _train_folder(run, sandbox_url, range(1), cut=True)
    transcripts = list(read_transcripts(run / TRAIN_TRANSCRIPTS))
    assert {(t["stop_reason"], t["reward"]) for t in transcripts} == {("max_tokens", -0.1)}
    assert replay([str(run), "--out", str(tmp_path / "replay")]) == 0
    report = json.loads((tmp_path / "replay" / "replay.json").read_text())
    assert (report["episodes"], report["identical"]) == (4, 4), report["outcomes"][0]["difference"]
    assert rescore([str(run), "--out", str(tmp_path / "rescore")]) == 0
    assert json.loads((tmp_path / "rescore" / "rescore.json").read_text())["reproduced"] == 4


def test_a_turn_whose_text_is_not_in_nfc_replays_identically(sandbox_url, tmp_path):
    """Replay tokenizes the recorded text again and the tokenizer normalizes it to NFC: an
    untrained model's turns (often not NFC) were reported as a "parse" difference whose
    two texts looked the same."""
    run = tmp_path / "train"
    _train_folder(run, sandbox_url, range(1), unnormalized=True)
    transcripts = list(read_transcripts(run / TRAIN_TRANSCRIPTS))
    assert all(t["conversation"][0]["text"].startswith("\uf9e4") for t in transcripts)
    assert replay([str(run), "--out", str(tmp_path / "replay")]) == 0
    report = json.loads((tmp_path / "replay" / "replay.json").read_text())
    assert (report["episodes"], report["identical"]) == (4, 4), report["outcomes"][0]["difference"]
