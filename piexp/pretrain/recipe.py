"""The recipe of the `learner-local` base model: its architecture, the episodes it is
pre-trained on and the optimisation, as one frozen record, and the two digests of its
cache. A build's folder is named by what the fit consumes (`content_key`: the recipe,
the tokenizer's files, the token sequences of the scripted episodes and the fit's code),
so an edit that leaves the episodes' tokens as they were (a comment, a docstring, a
refactoring) finds the model already built, and any change to those tokens builds a new
one. Knowing those tokens means rolling the episodes out, so each machine remembers
which content key the sources it last rolled out gave (`inputs_digest`: the recipe, the
data config and every source file that could shape the tokens); only when those change
are the episodes rolled out again, to learn the key, and the model is fitted only if
the key is new."""

from __future__ import annotations

import ast
import hashlib
import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from piexp.service.tiny_model import TINY_QWEN3_CONFIG, with_smaller_vocabulary

#: The piexp packages whose code can shape the pre-training episodes' tokens (the
#: sandbox's own code shapes the tool outputs).
SOURCE_PACKAGES = ("env", "policies", "tasks", "tokenizer", "pretrain", "sandbox")
SOURCE_MODULES = ("languages.py", "cookbook_compat.py")


@dataclass(frozen=True)
class LearnerRecipe:
    # Composed like a run's command line: the workspace tasks the model learns from
    # (experiments/learn_offline.yaml holds their families and sizes, one place for both).
    data_overrides: tuple[str, ...] = ("experiment=learn_offline",)
    tasks_per_family: int = 200  # train-split tasks rolled out (one episode each)
    # Scripted policies the episodes come from, with their shares: the base model's
    # behaviour mix. Only `oracle` solves a task (reward 1; crash earns 0.15 shaped, 0
    # binary); RL has to discover that. (With `wrong` as a third behaviour a 2-layer
    # model mixed up the two long programs' texts at this training budget.)
    policy_shares: tuple[tuple[str, float], ...] = (("oracle", 1 / 3), ("crash", 2 / 3))
    # A behaviour withheld from a family: each (family, policy, substitute) rolls out the
    # family's episodes drawn for `policy`, in the mix and the copy tasks, with
    # `substitute` instead. Empty for learner-local; bench/discovery.py builds a model that
    # never saw one family's oracle program, to see whether RL finds a program that works.
    substitutes: tuple[tuple[str, str, str], ...] = ()
    # The harnesses its episodes are played in, task i in harnesses[i % n] (the mix and the
    # copy tasks alike): ("builtin",) learns the reference environment's prompt, tools and
    # JSON results; ("builtin", "pi") half its episodes through the real Pi (Pi's system
    # prompt, its four tools, its plain-text results), one base model that acts in both.
    harnesses: tuple[str, ...] = ("builtin",)
    seed: int = 0  # weights init, episode order, policy draw, negative samples
    # tiny-local's toy Qwen3 with a wider MLP; its vocabulary is the tokenizer's below.
    architecture: dict[str, Any] = field(default_factory=lambda: {**TINY_QWEN3_CONFIG, "intermediate_size": 256})
    # Qwen3's first N BPE tokens (then its 26 added tokens): at hidden size 64 a pass
    # costs 0.07x what it costs with Qwen3's 151,643, for 1.18x the tokens per task
    # (bench/vocabulary.py); None keeps Qwen3's whole vocabulary.
    bpe_tokens: int | None = 8192
    batch_sequences: int = 3  # episodes per optimiser step (one sequence each, ~3.5 turns)
    learning_rate: float = 5e-3  # AdamW peak, cosine decay to 0 over all steps
    # Stating what the program printed means copying its digits from the tool output, an
    # induction behaviour a 2-layer model needs far more examples of than the mix holds
    # (in a first build, 1 in 3 episodes: the answers were wrong every time). So the last
    # turn of `copy_tasks_per_family` more oracle episodes per family is added, cut to
    # its answer and the `copy_window` tokens before it (the tool output): cheap
    # sequences that teach the copy and nothing about which behaviour to choose.
    copy_tasks_per_family: int = 900
    copy_window: int = 64
    copy_batch_sequences: int = 32  # copy windows per optimiser step
    # A copy learnt on windows alone fails in the whole ~1,700-token context: the
    # workspace's own numbers, far back, draw the copy away. So once the windows have
    # taught the copy, each step also fits whole answer turns (the same episodes, uncut)
    # and fewer windows; this learns to ignore those numbers. The whole turns are most
    # of the fit's time (attention over ~1,700 tokens; bench/learning.py has the
    # figures of this budget against the earlier, longer one).
    whole_turns_from_step: int = 300
    whole_turn_batch_sequences: int = 6  # whole answer turns per step from then on
    late_copy_batch_sequences: int = 16  # copy windows per step from then on
    steps: int = 600  # optimiser steps
    # Each step's loss: the cross-entropy at every weighted position over the data's own
    # tokens plus `sampled_negatives` others drawn afresh (a sampled softmax, ~50x cheaper
    # than the 152k-wide one here), plus the exact cross-entropy over the whole
    # vocabulary at `exact_positions` of them drawn at random, so that every token absent
    # from the data is pushed down at every step (without it, sampling at temperature 1
    # wandered into the vocabulary's tail within a few tokens).
    sampled_negatives: int = 2048
    exact_positions: int = 64

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        if self.harnesses == ("builtin",):
            # A recipe of the reference environment alone is written (and so keyed) as
            # before it could name harnesses: its builds keep their content keys.
            del data["harnesses"]
        return data

    @property
    def source_packages(self) -> tuple[str, ...]:
        """The piexp packages whose code can shape its episodes' tokens: a harness's own
        code shapes the prompts and results of the episodes played in it."""
        return SOURCE_PACKAGES + (("harness",) if set(self.harnesses) - {"builtin"} else ())

    def model_config(self) -> dict[str, Any]:
        """The architecture with the vocabulary size and special ids of the recipe's
        tokenizer (added tokens follow the BPE tokens: <|endoftext|>, <|im_start|>,
        <|im_end|>, ...)."""
        if self.bpe_tokens is None:
            return dict(self.architecture)
        return with_smaller_vocabulary(self.architecture, self.bpe_tokens)


def source_digest(package_root: Path, packages: tuple[str, ...] = SOURCE_PACKAGES) -> str:
    """SHA-256 over the files (name and bytes) that can shape the episodes' tokens."""
    digest = hashlib.sha256()
    files: list[Path] = []
    for name in packages:
        files.extend(p for p in (package_root / name).rglob("*") if p.is_file() and "__pycache__" not in p.parts)
    files.extend(package_root / name for name in SOURCE_MODULES)
    for path in sorted(files):
        digest.update(str(path.relative_to(package_root)).encode())
        digest.update(b"\0")
        digest.update(path.read_bytes())
        digest.update(b"\0")
    return digest.hexdigest()


def inputs_digest(recipe: LearnerRecipe, package_root: Path, data_config: dict[str, Any]) -> str:
    """What a machine's memo of content keys is keyed by: the recipe, the composed data
    config and the source digest. Any change to these may change the episodes' tokens,
    so it sends the build to roll them out again; it does not by itself fit a model."""
    payload = json.dumps(
        {
            "recipe": recipe.to_json(),
            "data_config": data_config,
            "sources": source_digest(package_root, recipe.source_packages),
        },
        sort_keys=True,
    )
    return hashlib.sha256(payload.encode()).hexdigest()[:16]


def code_behaviour_digest(paths: list[Path]) -> str:
    """SHA-256 over Python modules as their syntax trees without docstrings: comments,
    docstrings and layout do not change it, any change to what the code does does. For
    code only: a file whose text is read as data (a reference program) is hashed by its
    bytes instead (`source_digest`)."""
    digest = hashlib.sha256()
    for path in paths:
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            body = getattr(node, "body", None)
            if (
                isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
                and isinstance(body, list)
                and body
                and isinstance(body[0], ast.Expr)
                and isinstance(body[0].value, ast.Constant)
                and isinstance(body[0].value.value, str)
            ):
                node.body = body[1:] or [ast.Pass()]
        digest.update(path.name.encode() + b"\0" + ast.dump(tree, include_attributes=False).encode() + b"\0")
    return digest.hexdigest()


def files_digest(paths: list[Path]) -> str:
    """SHA-256 over files' names and bytes (the tokenizer's files a build copies)."""
    digest = hashlib.sha256()
    for path in sorted(paths):
        digest.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


def content_key(recipe: LearnerRecipe, tokenizer: str, data: str, fit: str) -> str:
    """The name of a build's folder: the recipe, the digests of the tokenizer's files,
    of the token sequences the fit consumes (`piexp.pretrain.fit_process.data_digest`)
    and of the fit's behaviour (`piexp.pretrain.fit_process.fit_digest`). The fit is
    deterministic in these (tests/pretrain checks the bytes), so one key is one model."""
    payload = json.dumps({"recipe": recipe.to_json(), "tokenizer": tokenizer, "data": data, "fit": fit}, sort_keys=True)
    return hashlib.sha256(payload.encode()).hexdigest()[:16]
