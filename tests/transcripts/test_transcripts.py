"""Transcripts and tool-call failure metrics through the real env: a policy that writes
raw model text (malformed calls, unknown tools, bad arguments, refused commands), the
real renderer, tools and sandbox; size caps, secret redaction, and resume consistency of
the compressed transcript file."""

from __future__ import annotations

import asyncio
import gzip
import json
import subprocess
import sys
from pathlib import Path

import pytest
import tinker
from tinker_cookbook.completers import TokensWithLogprobs

from piexp.config.compose import load
from piexp.env.dataset import episode_settings
from piexp.env.episode import get_run_renderer
from piexp.launch import evaluate
from piexp.env.splits import build_splits
from piexp.policies.rollout import run_episode
from piexp.policies.scripted import render_assistant_tokens
from piexp.transcripts import capture
from piexp.transcripts.store import EVAL_TRANSCRIPTS, TranscriptWriter, read_transcripts, transcript_key
from tests.job_launcher import run_piexp

BASE = ["mode=eval", "family=[arith]", "lang=[python]", "tasks.train_per_family=1", "tasks.eval_per_family=2"]
CANARY = "sk-transcript-canary-0123456789"


class TextPolicy:
    """Says the given raw texts, one per turn, as a model would sample them (the renderer's
    tokens; `cut_last` drops the end-of-turn token of the last, a truncated response)."""

    def __init__(self, renderer, texts: list[str], cut_last: bool = False) -> None:
        self.renderer, self.texts, self.cut_last, self.turn = renderer, texts, cut_last, 0

    async def __call__(self, model_input: tinker.ModelInput, stop, *, max_tokens=None) -> TokensWithLogprobs:
        text = self.texts[min(self.turn, len(self.texts) - 1)]
        self.turn += 1
        tokens = render_assistant_tokens(self.renderer, {"role": "assistant", "content": text}, stop)
        if self.cut_last and self.turn >= len(self.texts):
            tokens = tokens[:-1]
        return TokensWithLogprobs(tokens=tokens, maybe_logprobs=[0.0] * len(tokens), stop_reason="stop")


def call(name: str, arguments: str) -> str:
    return f'<tool_call>\n{{"name": "{name}", "arguments": {arguments}}}\n</tool_call>'


def episode(sandbox_url, texts, *overrides, cut_last=False):
    config = load([*BASE, *overrides])
    settings = episode_settings(config, sandbox_url)
    renderer = get_run_renderer(settings.resolved_renderer_name(), settings.model_name)
    task = build_splits(config).eval[0]
    policy = TextPolicy(renderer, texts, cut_last)
    return asyncio.run(run_episode(policy, "text", task, "python", settings))


def test_failures_are_counted_and_the_transcript_shows_them(sandbox_url, monkeypatch):
    monkeypatch.setenv("PIEXP_TEST_API_KEY", CANARY)
    texts = [
        "Let me launch something. " + call("launch_rockets", '{"secret": "' + CANARY + '"}'),
        call("write", '{"path": "solution.py"}'),  # no content: fails the tool's schema
        call("bash", '{"command": "rm -rf /"}'),  # not "<runtime> <file>": refused
        call("read", '{"path": "missing.txt"}'),
        '<tool_call>\n{"name": "write", "arguments": {"path": "x.py", "content": "print(1)"\n</tool_call>',  # bad JSON
    ]
    record = episode(sandbox_url, texts)
    assert record.error is None
    assert record.stop_reason == "parse_error"
    failures = record.failures
    assert (
        failures["unknown_tool"],
        failures["invalid_arguments"],
        failures["refused_command"],
        failures["tool_error"],
        failures["parse_error"],
    ) == (1, 1, 1, 1, 1)
    assert failures["calls"] == 5 and failures["max_turns"] == 0
    transcript = record.transcript
    text = json.dumps(transcript)
    assert CANARY not in text and "[redacted PIEXP_TEST_API_KEY]" in text
    roles = [m["role"] for m in transcript["conversation"]]
    assert roles == ["assistant", "tool"] * 4 + ["assistant"]
    assert transcript["conversation"][0]["tool_calls"][0]["name"] == "launch_rockets"
    assert "not found" in transcript["conversation"][1]["result"]["error"]
    assert transcript["conversation"][5]["result"]["status"] == "error"  # the refused bash call
    unparsed = transcript["conversation"][-1]["unparsed_tool_calls"][0]
    assert '"content": "print(1)"' in unparsed["raw_text"] and unparsed["error"]
    assert [t["sampled_tokens"] > 0 for t in transcript["turns"]] == [True] * 5
    assert transcript["turns"][-1]["flags"]["stop/parse_error"] == 1.0
    assert transcript["metrics"]["tool_called"] == 1.0 and transcript["reward"] == record.reward


def test_limits_and_a_truncated_response_are_recorded(sandbox_url):
    record = episode(sandbox_url, [call("read", '{"path": "query.txt"}')] * 5, "limits.max_turns=3")
    assert record.stop_reason == "max_turns" and record.failures["max_turns"] == 1
    cut = episode(sandbox_url, ["I will write " + call("read", '{"path": "query.txt"}')], cut_last=True)
    assert cut.stop_reason == "parse_error" and cut.failures["parse_error"] == 1
    last = cut.transcript["conversation"][-1]
    assert "not_in_history" in last and "I will write" in last["text"]


def test_caps_cut_with_a_marker_and_stay_within_the_episode_cap():
    stats = {"fields": 0, "chars_cut": 0}
    text = "x" * 3_000_000
    cut = capture._cut(text, capture.FIELD_CHARS, stats)
    assert len(cut) < capture.FIELD_CHARS + 100 and f"cut {3_000_000 - capture.FIELD_CHARS} of 3000000 chars" in cut
    transcript = {"conversation": [{"role": "tool", "text": text} for _ in range(100)], "prompt": []}
    final = capture.finalize(transcript)
    assert len(json.dumps(final)) <= capture.EPISODE_CHARS
    assert final["truncated"]["fields"] == 100 and final["truncated"]["chars_cut"] > 299_000_000


def test_writer_resume_drops_orphans_and_duplicates_and_survives_a_kill(tmp_path):
    path = tmp_path / EVAL_TRANSCRIPTS
    first = [{"policy": "p", "task_id": f"t{i}", "language": "python", "sample": 0, "n": 1} for i in range(3)]
    # A writer killed mid-run: the gzip stream never ends (no trailer), lines are synced.
    script = (
        f"import sys, json; sys.path.insert(0, {str(Path.cwd())!r})\n"
        "from piexp.transcripts.store import TranscriptWriter\n"
        f"w = TranscriptWriter({str(path)!r})\n"
        f"[w.write(t) for t in json.loads({json.dumps(json.dumps(first))})]\n"
        "import os; os._exit(9)\n"
    )
    assert subprocess.run([sys.executable, "-c", script]).returncode == 9
    assert [t["task_id"] for t in read_transcripts(path)] == ["t0", "t1", "t2"]
    # Resume: t1's record was never written (orphan); t0 is rerun and written again.
    keep = {transcript_key(first[0]), transcript_key(first[2])}
    with TranscriptWriter(path, keep=keep) as writer:
        writer.write({**first[0], "n": 2})
    kept = list(read_transcripts(path))
    assert sorted(t["task_id"] for t in kept) == ["t0", "t0", "t2"]  # a reader keeps the last per key
    with TranscriptWriter(path, keep=keep):
        pass
    assert sorted((t["task_id"], t["n"]) for t in read_transcripts(path)) == [("t0", 2), ("t2", 1)]
    with TranscriptWriter(path, run_bytes=0) as writer:
        writer.write({**first[1], "conversation": ["long"]})
    (stub,) = read_transcripts(path)
    assert "omitted" in stub and "conversation" not in stub
    assert gzip.decompress(path.read_bytes())  # closed normally: a complete gzip file


def test_eval_resume_keeps_transcripts_and_records_one_to_one(sandbox_url, tmp_path):
    config = load([*BASE, "policy=wrong", "k=2"])
    splits = build_splits(config)
    evaluate.run_eval(config, tmp_path, sandbox_url, splits)
    lines = (tmp_path / "episodes.jsonl").read_text().splitlines()
    # Interrupted: the last record never made it to disk, and its transcript is an orphan.
    (tmp_path / "episodes.jsonl").write_text("\n".join(lines[:-1]) + "\n")
    evaluate.run_eval(config, tmp_path, sandbox_url, splits)
    records = [json.loads(line) for line in (tmp_path / "episodes.jsonl").read_text().splitlines()]
    transcripts = list(read_transcripts(tmp_path / EVAL_TRANSCRIPTS))
    keys = sorted((r["task_id"], r["language"], r["sample"]) for r in records)
    assert len(keys) == 4 and keys == sorted((t["task_id"], t["language"], t["sample"]) for t in transcripts)
    results = json.loads((tmp_path / "results.json").read_text())
    assert results["overall"]["tool_failures"]["episodes"] == 4
    assert results["overall"]["tool_failures"]["calls"] == 12
    assert "## Tool-call failures" in (tmp_path / "results.md").read_text()
    assert (tmp_path / "viewer.html").is_file()


def test_show_prints_a_failed_episode_and_refuses_a_bad_number(sandbox_url, tmp_path):
    config = load([*BASE, "policy=wrong"])
    evaluate.run_eval(config, tmp_path, sandbox_url, build_splits(config))
    shown = run_piexp("show", str(tmp_path), "--failed", "0", timeout=120)
    assert shown.returncode == 0, shown.stderr
    for text in (
        "assistant",
        "-> write",
        "solution.py",
        "bash: ok",
        "stdout:",
        "response_answer_correct 0",
        "reward 0 binary",
    ):
        assert text in shown.stdout, text
    listed = run_piexp("show", str(tmp_path), "--json", "--lang", "python", timeout=120)
    rows = json.loads(listed.stdout)
    assert len(rows) == 2 and all(row["language"] == "python" and not row["passed"] for row in rows)
    bad = run_piexp("show", str(tmp_path), "7", timeout=120)
    assert bad.returncode == 2 and "There is no episode 7" in bad.stderr and "Traceback" not in bad.stderr


@pytest.mark.parametrize("target", ["missing", "file"])
def test_show_explains_a_bad_folder(tmp_path, target):
    path = tmp_path / target
    if target == "file":
        path.write_text("x")
    result = run_piexp("show", str(path), timeout=120)
    assert result.returncode == 2 and "Cannot show" in result.stderr and "Traceback" not in result.stderr


def test_a_turn_cut_at_the_generation_limit_is_not_called_a_context_overflow():
    """The viewer marked episodes whose turn hit max_tokens as `context_overflow` while the
    metrics said `max_tokens_reached`: two limits, two kinds."""
    from piexp.transcripts.failures import count_failures

    cut = count_failures([], [{"max_tokens_reached": 1.0}], "max_tokens")
    overflowed = count_failures([], [{"context_overflow": 1.0}], "context_overflow")
    assert (cut["max_tokens"], cut["context_overflow"]) == (1, 0)
    assert (overflowed["max_tokens"], overflowed["context_overflow"]) == (0, 1)
