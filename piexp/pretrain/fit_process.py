"""The learner build's fit, run in a child process that allocates with tcmalloc
(piexp.allocator; torch frees and allocates each step's activations and gradients, tens
to hundreds of MB): the build hands it the recipe and the token sequences in a file, the
child fits the model, writes it, its FitReport and the allocator it had loaded into the
build's staging folder and reports each step on its stdout, which the build shows as its
progress."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import pickle
import subprocess
import sys
from array import array
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from piexp.pretrain.data import TokenSequence
from piexp.pretrain.recipe import LearnerRecipe, code_behaviour_digest
from piexp.pretrain.training import FitReport

INPUTS = "fit_inputs.pickle"
REPORT = "fit_report.json"
STEP = "FIT_STEP "  # a line the child prints after each step, with the step's note


@dataclass(frozen=True)
class FitData:
    """The sequences of one fit (piexp.pretrain.training.fit's arguments)."""

    train: Sequence[TokenSequence]
    heldout: Sequence[TokenSequence]
    copies: Sequence[TokenSequence]
    heldout_answers: Sequence[TokenSequence]
    whole_turns: Sequence[TokenSequence]


def data_digest(data: FitData) -> str:
    """SHA-256 over everything of ``data`` the fit reads, in order: each part's sequences
    with their tokens, targets, weights, policy, family, episode and reward (the
    batches are drawn by family and policy). Cheap beside what it hashes: for the
    recipe's 2,200 episodes (3.7M tokens over the five parts) 0.59 s, 1.4 s with the
    tokenizer's and the fit's digests, where rolling those episodes out took 558 s on
    the same run (at f55c19e, 2026-12-04, the 2-core AMD EPYC development machine under
    a load average of 14) and, with the machine to itself, 79-81 s of a whole build's
    250 s (docs/benchmarks.md).
    """
    digest = hashlib.sha256()
    for part in dataclasses.fields(data):
        sequences = getattr(data, part.name)
        digest.update(f"{part.name}:{len(sequences)}\0".encode())
        for s in sequences:
            head = json.dumps([s.policy, s.family, s.episode, s.reward, len(s.tokens), len(s.targets), len(s.weights)])
            digest.update(head.encode())
            digest.update(array("q", s.tokens).tobytes())
            digest.update(array("q", s.targets).tobytes())
            digest.update(array("d", s.weights).tobytes())
    return digest.hexdigest()


#: The modules whose code decides the weights a fit makes from its data and recipe.
FIT_MODULES = ("training.py", "fit_process.py", "data.py")


def fit_digest() -> str:
    """The fit's behaviour: its modules' code (`code_behaviour_digest`: not their comments
    or docstrings) and the versions of torch and transformers that run it."""
    from importlib.metadata import version

    here = Path(__file__).resolve().parent
    code = code_behaviour_digest([here / name for name in FIT_MODULES])
    return json.dumps({"code": code, "torch": version("torch"), "transformers": version("transformers")})


def fit_in_child(staging: Path, recipe: LearnerRecipe, data: FitData, progress: Any) -> tuple[FitReport, str]:
    """Fit the recipe's model to ``data`` in a child process with the allocator, writing
    it into ``staging`` (which must exist); advance ``progress`` at each step. Returns
    the fit's report and the allocator the child had loaded."""
    from piexp.allocator import allocator_env

    inputs = staging / INPUTS
    inputs.write_bytes(pickle.dumps((recipe, data)))
    command = [sys.executable, "-m", "piexp.pretrain.fit_process", str(staging)]
    # The child imports this very piexp, wherever the parent found it.
    package_root = str(Path(__file__).resolve().parents[2])
    path = os.pathsep.join(filter(None, [package_root, os.environ.get("PYTHONPATH")]))
    env = {**os.environ, "PYTHONPATH": path, **allocator_env()[0]}
    with subprocess.Popen(command, stdout=subprocess.PIPE, text=True, env=env) as child:
        assert child.stdout is not None
        for line in child.stdout:
            if line.startswith(STEP):
                progress.advance(note=line.removeprefix(STEP).strip())
            else:
                sys.stdout.write(line)
    inputs.unlink(missing_ok=True)
    if child.returncode != 0:
        raise RuntimeError(f"the learner-local fit failed in its process (exit {child.returncode}); see above")
    written = json.loads((staging / REPORT).read_text(encoding="utf-8"))
    (staging / REPORT).unlink()
    fields = written["report"]
    fields["threads"] = {int(threads): steps for threads, steps in fields["threads"].items()}
    return FitReport(**fields), written["allocator"]


class _StepLines:
    """The fit's progress as lines for the parent."""

    def advance(self, n: int = 1, note: str = "") -> None:
        print(STEP + note, flush=True)


def main(staging: Path) -> None:
    import torch
    from transformers import AutoModelForCausalLM, Qwen3Config

    from piexp.allocator import TCMALLOC
    from piexp.pretrain.training import fit

    recipe, data = pickle.loads((staging / INPUTS).read_bytes())
    torch.manual_seed(recipe.seed)
    model = AutoModelForCausalLM.from_config(Qwen3Config(**recipe.model_config()), dtype=torch.float32)
    report = fit(
        model, data.train, data.heldout, recipe, _StepLines(), data.copies, data.heldout_answers, data.whole_turns
    )
    model.save_pretrained(staging)
    allocator = "tcmalloc" if TCMALLOC in Path("/proc/self/maps").read_text() else "glibc malloc"
    written = {"report": dataclasses.asdict(report), "allocator": allocator}
    (staging / REPORT).write_text(json.dumps(written), encoding="utf-8")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
