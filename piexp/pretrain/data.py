"""Episodes of scripted policies as token sequences: each train task is rolled out once,
through tinker-cookbook's rollout code, the run's renderer, piexp's tools and the real
sandbox, by the policy given for it; each trajectory becomes the sequence a model is
trained on (tinker-cookbook's `trajectory_to_data`: observations as context, the
policy's actions as weighted targets; one sequence per episode, as its observations
extend each other). The warm start uses the same rollouts."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from piexp.config.schema import RunConfig
from piexp.tasks import Task

#: Scripted episodes rolled out at once, in any harness (each holds a sandbox run while its
#: program executes; a Pi episode also a warm slot): more only queue on the machine's cores.
CONCURRENT_EPISODES = 8


@dataclass(frozen=True)
class TokenSequence:
    """One training sequence: `tokens` in, `targets` out (the next token at each position),
    `weights` 1 where the policy acted."""

    policy: str
    reward: float
    episode: int  # index of the episode it comes from
    tokens: list[int]
    targets: list[int]
    weights: list[float]
    family: str = ""  # the task's family: batches hold each family's behaviours in proportion


async def scripted_trajectories(
    config: RunConfig, sandbox_url: str, tasks: Sequence[Task], policies: Sequence[str], progress: Any = None
) -> tuple[list[Any], list[float]]:
    """One episode per task by the scripted policy named at the same index (tasks cycle
    through the run's train languages): the trajectories and their total rewards."""
    from tinker_cookbook.rl.rollouts import do_group_rollout

    from piexp.env.dataset import episode_settings
    from piexp.env.episode import WorkspaceGroupBuilder, get_run_renderer
    from piexp.env.splits import build_splits
    from piexp.policies import make_policy

    splits = build_splits(config)
    settings = episode_settings(config, sandbox_url)
    renderer = get_run_renderer(settings.resolved_renderer_name(), settings.model_name)
    known = [*splits.train, *splits.eval, *tasks]
    made = {name: make_policy(name, renderer, known) for name in sorted(set(policies))}
    languages = config.train_languages
    gate = asyncio.Semaphore(CONCURRENT_EPISODES)

    async def one(index: int, task: Task) -> Any:
        builder = WorkspaceGroupBuilder(
            task=task, language=languages[index % len(languages)], settings=settings, group_size=1
        )
        async with gate:
            group = await do_group_rollout(builder, made[policies[index]])
        if progress is not None:
            progress.advance()
        return group

    groups = await asyncio.gather(*(one(i, task) for i, task in enumerate(tasks)))
    return [g.trajectories_G[0] for g in groups], [float(g.get_total_rewards()[0]) for g in groups]


#: Scripted episodes played in a harness: (config, sandbox URL, tasks, the policy for each,
#: progress) -> (trajectories, rewards), as `Harness.scripted_trajectories` plays them.
Rollout = Callable[[RunConfig, str, Sequence[Task], Sequence[str], Any], Awaitable[tuple[list[Any], list[float]]]]


async def harness_trajectories(
    config: RunConfig,
    sandbox_url: str,
    tasks: Sequence[Task],
    policies: Sequence[str],
    harnesses: Sequence[str],
    rollouts: Mapping[str, Rollout],
    progress: Any = None,
) -> tuple[list[Any], list[float]]:
    """`scripted_trajectories` with task i played in harness `harnesses[i % n]`: the
    reference environment's here, any other by its entry in `rollouts`; in task order."""
    played_in: dict[str, list[int]] = {}
    for index in range(len(tasks)):
        played_in.setdefault(harnesses[index % len(harnesses)], []).append(index)
    missing = sorted(set(played_in) - set(rollouts) - {"builtin"})
    if missing:
        raise ValueError(f"episodes in harness {', '.join(missing)} need a rollout for it (`rollouts`)")

    async def rolled(harness: str, indices: list[int]) -> tuple[list[Any], list[float]]:
        rollout = rollouts.get(harness, scripted_trajectories)
        return await rollout(config, sandbox_url, [tasks[i] for i in indices], [policies[i] for i in indices], progress)

    parts = await asyncio.gather(*(rolled(harness, indices) for harness, indices in played_in.items()))
    trajectories: list[Any] = [None] * len(tasks)
    rewards = [0.0] * len(tasks)
    for indices, (part_trajectories, part_rewards) in zip(played_in.values(), parts, strict=True):
        for index, trajectory, reward in zip(indices, part_trajectories, part_rewards, strict=True):
            trajectories[index], rewards[index] = trajectory, reward
    return trajectories, rewards


def token_sequences(
    trajectories: Sequence[Any], rewards: Sequence[float], policies: Sequence[str], families: Sequence[str]
) -> list[TokenSequence]:
    from tinker_cookbook.rl.data_processing import trajectory_to_data

    sequences = []
    for episode, (trajectory, reward, policy, family) in enumerate(
        zip(trajectories, rewards, policies, families, strict=True)
    ):
        for datum in trajectory_to_data(trajectory, 1.0):
            sequences.append(
                TokenSequence(
                    policy=policy,
                    reward=reward,
                    episode=episode,
                    tokens=datum.model_input.to_ints(),
                    targets=[int(t) for t in datum.loss_fn_inputs["target_tokens"].tolist()],
                    weights=[float(w) for w in datum.loss_fn_inputs["mask"].tolist()],
                    family=family,
                )
            )
    return sequences


def answer_turns(sequences: Sequence[TokenSequence]) -> list[TokenSequence]:
    """Each episode's answer turn (its last action) in its whole context: the episode's
    last sequence, weighted on that turn alone (an episode is one sequence when its
    observations extend each other, piexp.env.sampled_context, else one per turn)."""
    last: dict[int, TokenSequence] = {}
    for sequence in sequences:
        last[sequence.episode] = sequence
    return [_last_turn_only(sequence) for sequence in last.values()]


def _last_turn_only(sequence: TokenSequence) -> TokenSequence:
    weights = list(sequence.weights)
    end = max(i for i, w in enumerate(weights) if w > 0)
    start = end
    while start > 0 and weights[start - 1] > 0:
        start -= 1
    weights[:start] = [0.0] * start
    return dataclasses.replace(sequence, weights=weights)


def answer_windows(sequences: Sequence[TokenSequence], window: int) -> list[TokenSequence]:
    """Each episode's answer turn cut to the answer and the `window` tokens before it."""
    windows = []
    for sequence in answer_turns(sequences):
        first = next(i for i, w in enumerate(sequence.weights) if w > 0)
        start = max(0, first - window)
        windows.append(
            TokenSequence(
                policy=sequence.policy,
                reward=sequence.reward,
                episode=sequence.episode,
                tokens=sequence.tokens[start:],
                targets=sequence.targets[start:],
                weights=sequence.weights[start:],
                family=sequence.family,
            )
        )
    return windows
