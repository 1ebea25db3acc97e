"""Fit the learner model to token sequences: next-token cross-entropy on the weighted
positions only (the policy's actions), AdamW with warm-up and cosine decay; each step's
loss is a sampled softmax at every position plus the exact softmax at a random few (see
`LearnerRecipe`). Deterministic for a recipe on one machine, whatever number of threads
the fit runs on (tests/pretrain checks the bytes)."""

from __future__ import annotations

import math
import os
import random
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from piexp.pretrain.data import TokenSequence, answer_windows
from piexp.pretrain.recipe import LearnerRecipe


@dataclass
class FitReport:
    step_losses: list[float]  # exact-softmax mean NLL of each step's sampled positions
    heldout_nll: float  # exact-softmax mean NLL per weighted token on the held-out sequences
    heldout_token_accuracy: float  # share of held-out weighted tokens whose argmax is the target
    heldout_answer_accuracy: float  # share of held-out oracle answers, in full context, whose every token is the argmax
    heldout_window_answer_accuracy: float  # the same with each answer turn cut to the recipe's copy window
    threads: dict[int, int]  # steps run on each number of torch threads


class ThreadBudget:
    """torch's threads for the fit: one per core the machine's other processes left idle,
    at most 4, chosen again every `every` steps from the CPU time they used meanwhile.
    torch's default takes every core and spins while it waits (on a loaded machine two
    threads ran a step 6x slower than one); a load average would also count the build's
    own episodes just before the fit, and stay high for minutes after them."""

    def __init__(self, every: int = 20) -> None:
        self.every = every
        self.cores = len(os.sched_getaffinity(0))
        self.steps: dict[int, int] = {}
        self._mark = _cpu_seconds()
        time.sleep(0.5)  # a first interval to measure the others on
        self.threads = self._choose()

    def step(self, step: int) -> None:
        if step and step % self.every == 0:
            self.threads = self._choose()
        self.steps[self.threads] = self.steps.get(self.threads, 0) + 1

    def _choose(self) -> int:
        import torch

        now = _cpu_seconds()
        busy, own, wall = (b - a for a, b in zip(self._mark, now, strict=True))
        self._mark = now
        others = max(0.0, busy - own) / max(wall, 1e-3)
        threads = max(1, min(4, self.cores - round(others)))
        torch.set_num_threads(threads)
        return threads


def _cpu_seconds() -> tuple[float, float, float]:
    """(CPU seconds every process on the machine has used, this process's, wall clock)."""
    with open("/proc/stat", encoding="ascii") as stat:
        ticks = [int(value) for value in stat.readline().split()[1:8]]  # user .. softirq
    busy = sum(ticks) - ticks[3] - ticks[4]  # not idle, not iowait
    times = os.times()
    return busy / os.sysconf("SC_CLK_TCK"), times.user + times.system, time.monotonic()


def fit(
    model: Any,
    sequences: Sequence[TokenSequence],
    heldout: Sequence[TokenSequence],
    recipe: LearnerRecipe,
    progress: Any = None,
    copies: Sequence[TokenSequence] = (),
    heldout_answers: Sequence[TokenSequence] = (),
    whole_turns: Sequence[TokenSequence] = (),
) -> FitReport:
    """Fit `model` to `sequences` and, each step, to some of the answer windows `copies`
    and (from `recipe.whole_turns_from_step`) of the whole answer turns `whole_turns`;
    measure it on `heldout` and on the whole answer turns `heldout_answers`, in their
    full context and cut to the recipe's window."""
    import torch

    budget = ThreadBudget()
    torch.manual_seed(recipe.seed)
    generator = torch.Generator().manual_seed(recipe.seed)
    vocab = model.config.vocab_size
    data = [(torch.tensor(s.tokens), torch.tensor(s.targets), torch.tensor(s.weights) > 0) for s in sequences]
    seen = sorted({t for s in (*sequences, *copies, *whole_turns) for t in (*s.tokens, *s.targets)})
    shortlist = torch.tensor(seen)
    outside = torch.ones(vocab, dtype=torch.bool)
    outside[shortlist] = False
    outside_ids = outside.nonzero().squeeze(1)
    head = model.lm_head.weight
    optimizer = torch.optim.AdamW(model.parameters(), lr=recipe.learning_rate, weight_decay=0.0)
    total = recipe.steps
    order: list[int] = []
    copy_order: list[int] = []
    whole_order: list[int] = []
    shuffler = random.Random(recipe.seed)
    losses: list[float] = []
    for step in range(total):
        budget.step(step)
        while len(order) < recipe.batch_sequences:
            order[:0] = _spread_by_behaviour([(s.family, s.policy) for s in sequences], shuffler)
        batch = [data[order.pop()] for _ in range(recipe.batch_sequences)]
        warm = min(1.0, (step + 1) / 20)
        for group in optimizer.param_groups:
            group["lr"] = recipe.learning_rate * warm * 0.5 * (1 + math.cos(math.pi * step / total))
        negatives = outside_ids[torch.randperm(len(outside_ids), generator=generator)[: recipe.sampled_negatives]]
        candidates = torch.cat([shortlist, negatives])
        position = torch.full((vocab,), -1, dtype=torch.long)
        position[candidates] = torch.arange(len(candidates))
        optimizer.zero_grad(set_to_none=True)
        hidden_parts = [hidden_at(model, tokens[None], mask[None]) for tokens, _, mask in batch]
        label_parts = [targets[mask] for _, targets, mask in batch]
        late = step >= recipe.whole_turns_from_step
        for pool, pool_order, count in (
            (copies, copy_order, recipe.late_copy_batch_sequences if late else recipe.copy_batch_sequences),
            (whole_turns, whole_order, recipe.whole_turn_batch_sequences if late else 0),
        ):
            if pool and count:
                while len(pool_order) < count:
                    pool_order.extend(shuffler.sample(range(len(pool)), len(pool)))
                hidden, labels = _weighted_hidden(model, [pool[pool_order.pop()] for _ in range(count)])
                hidden_parts.append(hidden)
                label_parts.append(labels)
        hidden = torch.cat(hidden_parts)
        labels = torch.cat(label_parts)
        sampled = torch.nn.functional.cross_entropy(hidden @ head[candidates].T, position[labels])
        chosen = torch.randperm(len(labels), generator=generator)[: recipe.exact_positions]
        exact = torch.nn.functional.cross_entropy(hidden[chosen] @ head.T, labels[chosen])
        # The backward pass on one thread: torch's fused attention gives the same forward
        # bytes on any number of threads, but not the same gradients on every CPU (on an
        # AVX-512 Xeon, 1 and 2 threads differed), and a build must be one model per recipe.
        torch.set_num_threads(1)
        try:
            (sampled + exact).backward()
        finally:
            torch.set_num_threads(budget.threads)
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        losses.append(exact.item())
        if progress is not None:
            progress.advance(note=f"nll {exact.item():.3f}")
    nll, accuracy = evaluate(model, heldout)
    answers = sum(_all_argmax(model, answer) for answer in heldout_answers) / max(len(heldout_answers), 1)
    windows = answer_windows(heldout_answers, recipe.copy_window)
    window_answers = sum(_all_argmax(model, answer) for answer in windows) / max(len(windows), 1)
    return FitReport(
        step_losses=losses,
        heldout_nll=nll,
        heldout_token_accuracy=accuracy,
        heldout_answer_accuracy=answers,
        heldout_window_answer_accuracy=window_answers,
        threads=budget.steps,
    )


def _spread_by_behaviour(behaviours: Sequence[tuple[str, str]], shuffler: random.Random) -> list[int]:
    """One pass over the sequences, to be taken from the end, in an order that spreads
    each behaviour's (a family's episodes by one policy) evenly through it: smooth
    weighted round-robin over the behaviours, each one's own sequences shuffled. Every
    batch (or two, with two families) then holds the behaviours in the data's
    proportions, give or take one. Batches drawn at random did not, and where the
    policies part (one token: the first of the first turn) each step pushed the choice
    toward whichever policy its batch held more of; the choice ended wherever the last
    steps left it (bench/learning.py has the figures), and that set how often the base
    model ever solved a task."""
    strata: dict[tuple[str, str], list[int]] = {}
    for index, behaviour in enumerate(behaviours):
        strata.setdefault(behaviour, []).append(index)
    queues = {behaviour: shuffler.sample(indices, len(indices)) for behaviour, indices in sorted(strata.items())}
    credit = dict.fromkeys(queues, 0)
    order: list[int] = []
    for _ in range(len(behaviours)):
        for behaviour, indices in strata.items():
            credit[behaviour] += len(indices)
        chosen = max((behaviour for behaviour in queues if queues[behaviour]), key=lambda b: credit[b])
        credit[chosen] -= len(behaviours)
        order.append(queues[chosen].pop())
    return order


def _weighted_hidden(model: Any, chosen: Sequence[TokenSequence]) -> tuple[Any, Any]:
    """The last hidden states at the weighted positions of `chosen`, run as one padded
    batch, and their targets. Padding goes on the right, where a causal model's earlier
    positions cannot see it, and carries no weight."""
    import torch

    pad = model.config.pad_token_id
    width = max(len(c.tokens) for c in chosen)
    tokens = torch.full((len(chosen), width), pad, dtype=torch.long)
    targets = torch.full((len(chosen), width), pad, dtype=torch.long)
    mask = torch.zeros((len(chosen), width), dtype=torch.bool)
    for row, c in enumerate(chosen):
        tokens[row, : len(c.tokens)] = torch.tensor(c.tokens)
        targets[row, : len(c.targets)] = torch.tensor(c.targets)
        mask[row, : len(c.weights)] = torch.tensor(c.weights) > 0
    return hidden_at(model, tokens, mask), targets[mask]


def hidden_at(model: Any, tokens: Any, keep: Any) -> Any:
    """`model.model(input_ids=tokens).last_hidden_state[keep]` (`keep`: a [batch, length]
    mask), with the last layer computed at the kept positions only: its keys and values
    come from every position, but its queries, attention output and MLP elsewhere feed
    nothing the loss reads. That is half of a pass over a whole answer turn, of which
    only the last ~14 of ~1,700 tokens carry weight (bench/pretrain_fit.py). Positions
    after a row's last kept one are not computed at all. Same values to float rounding
    (tests/pretrain checks it)."""
    import torch
    from transformers.models.qwen3.modeling_qwen3 import rotate_half

    inner = model.model
    if not keep.any():
        return inner.embed_tokens.weight.new_zeros((0, model.config.hidden_size))
    length = int(keep.nonzero()[:, 1].max()) + 1
    tokens, keep = tokens[:, :length], keep[:, :length]
    positions = torch.arange(length)[None]
    hidden = inner.embed_tokens(tokens)
    cos, sin = inner.rotary_emb(hidden, positions)
    for layer in inner.layers[:-1]:  # causal (no mask: padding is on the right, after every kept position)
        hidden = layer(hidden, attention_mask=None, position_embeddings=(cos, sin), position_ids=positions)
    last = inner.layers[-1]
    attention = last.self_attn
    head_dim, groups = attention.head_dim, attention.num_key_value_groups  # query head h reads key head h // groups
    normed = last.input_layernorm(hidden)
    keys = attention.k_norm(attention.k_proj(normed).view(*tokens.shape, -1, head_dim)).transpose(1, 2)
    keys = keys * cos[:, None] + rotate_half(keys) * sin[:, None]
    values = attention.v_proj(normed).view(*tokens.shape, -1, head_dim).transpose(1, 2)
    rows, columns = keep.nonzero(as_tuple=True)
    queries = attention.q_norm(attention.q_proj(normed[rows, columns]).view(len(rows), -1, head_dim))
    queries = queries * cos[0, columns][:, None] + rotate_half(queries) * sin[0, columns][:, None]
    outputs = []
    for row in range(tokens.shape[0]):
        chosen = rows == row
        count = int(chosen.sum())
        if not count:
            continue
        seen = int(columns[chosen].max()) + 1
        # torch's fused attention: the same bytes on any number of threads (a matmul over
        # the keys did not keep them), which the build's byte-identity needs.
        mixed = torch.nn.functional.scaled_dot_product_attention(
            queries[chosen].transpose(0, 1)[None],
            keys[row, :, :seen].repeat_interleave(groups, dim=0)[None],
            values[row, :, :seen].repeat_interleave(groups, dim=0)[None],
            attn_mask=torch.arange(seen)[None, :] <= columns[chosen][:, None],
            scale=attention.scaling,
        )
        outputs.append(mixed[0].transpose(0, 1).reshape(count, -1))
    state = hidden[rows, columns] + attention.o_proj(torch.cat(outputs))
    state = state + last.mlp(last.post_attention_layernorm(state))
    return inner.norm(state)


def _all_argmax(model: Any, sequence: TokenSequence) -> bool:
    import torch

    with torch.no_grad():
        mask = torch.tensor(sequence.weights) > 0
        logits = hidden_at(model, torch.tensor(sequence.tokens)[None], mask[None]) @ model.lm_head.weight.T
        return bool((logits.argmax(-1) == torch.tensor(sequence.targets)[mask]).all())


def evaluate(model: Any, sequences: Sequence[TokenSequence]) -> tuple[float, float]:
    """Exact-softmax mean NLL and argmax accuracy per weighted token."""
    import torch

    head = model.lm_head.weight
    nll, right, count = 0.0, 0, 0
    with torch.no_grad():
        for s in sequences:
            mask = torch.tensor(s.weights) > 0
            hidden = hidden_at(model, torch.tensor(s.tokens)[None], mask[None])
            logits = hidden @ head.T
            targets = torch.tensor(s.targets)[mask]
            nll += float(torch.nn.functional.cross_entropy(logits, targets, reduction="sum"))
            right += int((logits.argmax(-1) == targets).sum())
            count += int(mask.sum())
    return nll / max(count, 1), right / max(count, 1)
