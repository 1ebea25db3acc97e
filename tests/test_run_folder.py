"""A whole offline run as a user starts it: what its folder holds, and that no secret
from the environment leaks into any file of it."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
from pathlib import Path

CANARY = "sk-canary-0123456789abcdef"


def test_offline_eval_run_folder_is_complete_and_secret_free(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    env = {**os.environ, "TINKER_API_KEY": CANARY, "WANDB_API_KEY": CANARY + "-wandb"}
    result = subprocess.run(
        [sys.executable, "-m", "piexp", "mode=eval", "policy=oracle", "family=arith,dates",
         "lang=python,javascript", "tasks.train_per_family=2", "tasks.eval_per_family=2",
         "mode.preflight=false", f"hydra.run.dir={run_dir}"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    for name in (".hydra/config.yaml", ".hydra/overrides.yaml", "manifest.json", "results.json",
                 "results.md", "results.png", "transcripts.jsonl.gz", "viewer.html"):
        assert (run_dir / name).is_file(), name
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["seed"] == 0
    assert len(manifest["task_digests"]["train"]) == 4 and len(manifest["task_digests"]["eval"]) == 4
    assert manifest["overlap_report"]
    assert "git_commit" in manifest and "packages" in json.dumps(manifest)
    for path in run_dir.rglob("*"):
        if path.is_file():
            # Compressed files (transcripts) are read decompressed: a leak would hide in them.
            content = gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes()
            assert CANARY.encode() not in content, f"secret leaked into {path}"
    assert CANARY not in result.stdout + result.stderr
