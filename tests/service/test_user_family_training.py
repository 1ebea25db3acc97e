"""A family written by `new-family` outside piexp and a JSON Lines
task file train together in the smallest `service=local model=tiny-local` loop (one RL
step), selected with `--config-dir`; the episodes trained on come from both, the
manifest records both origins, and `reproduce --check-only` accepts the run. Slow: a
local SkyRL server and one RL step, about 2-4 minutes on 2 CPU cores."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from piexp.transcripts.store import TRAIN_TRANSCRIPTS, read_transcripts
from tests.job_launcher import run_piexp

pytestmark = pytest.mark.slow

TRAIN = [
    "service=local", "model=tiny-local", "lang=python", "tasks.train_per_family=2", "tasks.eval_per_family=1",
    # A batch of every group: 2 train tasks of each family, one language.
    "mode.group_size=2", "mode.groups_per_batch=4", "mode.max_steps=1", "mode.save_every=0", "mode.eval_every=0",
    "mode.preflight=false", "limits.max_turns=2", "limits.max_generation_tokens=64",
]  # fmt: skip


def _piexp(cwd: Path, *args: str, pythonpath: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "TINKER_API_KEY"}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(pythonpath), env.get("PYTHONPATH", "")) if p)
    return run_piexp(*args, cwd=cwd, env=env, timeout=1200)


def test_a_scaffolded_family_and_a_task_file_train_in_the_smallest_local_loop(
    server_venv: Path, tiny_model: Path, tmp_path: Path
) -> None:
    """Slow (minutes): a local server and one RL step on two user families."""
    mine = tmp_path / "mine"
    made = _piexp(tmp_path, "new-family", "evens", "--dir", str(mine), pythonpath=mine)
    assert made.returncode == 0, made.stderr[-3000:]
    tasks = mine / "sums.jsonl"
    tasks.write_text(
        "".join(
            json.dumps({"id": f"t{i}", "instruction": "Print the sum of the numbers in `numbers.txt`.",
                        "files": {"numbers.txt": "".join(f"{n}\n" for n in range(i, i + 5))},
                        "answer": sum(range(i, i + 5)),
                        "references": {"python": 'print(sum(int(l) for l in open("numbers.txt") if l.strip()))\n'}})
            + "\n"
            for i in range(8)
        )
    )  # fmt: skip
    (mine / "conf" / "family" / "sums.yaml").write_text(
        f"# @package family\nsums:\n  _target_: piexp.tasks.task_file.TaskFileFamily\n  path: {tasks}\n"
        "  eval_percent: 30\n"
    )
    run = tmp_path / "train"
    trained = _piexp(tmp_path, "--config-dir", str(mine / "conf"), "family=evens,sums", *TRAIN,
                     f"hydra.run.dir={run}", pythonpath=mine)  # fmt: skip
    assert trained.returncode == 0, trained.stderr[-6000:]
    families = {t["family"] for t in read_transcripts(run / TRAIN_TRANSCRIPTS)}
    assert families == {"evens", "sums"}, "one RL step trained on both families' groups"
    origins = json.loads((run / "manifest.json").read_text())["family_origins"]
    assert origins["sums"]["kind"] == "task_file" and "evens" in origins
    checked = _piexp(tmp_path, "reproduce", str(run), "--check-only", pythonpath=mine)
    assert checked.returncode == 0, checked.stderr[-3000:]
