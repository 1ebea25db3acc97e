"""What a node of a Ray cluster runs for a run with `rollouts=ray` (the driver's side is
`piexp.launch.ray_rollouts`): a training group, an eval or check episode, and the facts
the driver checks before any episode (piexp's version, the sandbox, the harness).

Each Ray worker process plays against a sandbox of its own node: the run's embedded
sandbox, started in that process at its first group and kept for the process's life
(it dies with the process). A group is played by the cookbook's own rollout function;
its recording stages only make their records here
(`piexp.env.training_pipeline.NodeGroup`), which the driver writes once it accepts the
group's result. Groups and eval or check episodes play in the process's one event loop,
where the harness it keeps (Pi's warm slots: their processes' streams, their locks)
lives. Nothing here writes into the run folder."""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import dataclasses
import functools
import hashlib
import socket
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tinker_cookbook.completers import TokenCompleter
from tinker_cookbook.rl.types import TrajectoryGroup

from piexp.config.schema import HarnessSettings, RunConfig, SandboxSettings
from piexp.env.episode import EpisodeSettings
from piexp.env.group_wrappers import GroupWrapper, with_sandbox
from piexp.env.training_pipeline import NodeGroup
from piexp.errors import UserError
from piexp.policies.rollout import EpisodeRecord
from piexp.tasks import Task

__all__ = ["NodeFacts", "PlayedGroup", "PolicyRecipe", "node_facts", "play_episode_on_node", "play_group_on_node"]


def node_label() -> str:
    """This node as records name it: its host and the start of its Ray node id."""
    import ray

    return f"{socket.gethostname()}/{ray.get_runtime_context().get_node_id()[:8]}"


@functools.cache
def source_digest() -> str:
    """A digest of piexp's Python source: two nodes with the same one run the same code."""
    root = Path(__file__).resolve().parents[1]
    digest = hashlib.sha256()
    for path in sorted(root.rglob("*.py")):
        digest.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:16]


# This process's sandboxes, by their settings: started at the first episode, kept open.
_sandboxes: dict[str, str] = {}


def node_sandbox(settings: SandboxSettings) -> str:
    """The /run_code URL of this process's sandbox for `settings` (an embedded one is
    started once, here; a remote one is the same loopback address on this node)."""
    from piexp.launch.sandbox import run_sandbox

    key = settings.model_dump_json()
    if key not in _sandboxes:
        stack = contextlib.ExitStack()
        _sandboxes[key] = stack.enter_context(run_sandbox(settings))
        atexit.register(stack.close)
    return _sandboxes[key]


@functools.cache
def prepare_model(model_name: str) -> None:
    """The model's tokenizer, registered offline in this process as the driver did."""
    from piexp.launch.base_model import register_local_model_tokenizer

    if Path(model_name).is_absolute() and Path(model_name).is_dir():
        from piexp.tokenizer import register_offline_tokenizer

        register_offline_tokenizer(model_name)
    else:
        register_local_model_tokenizer(model_name)


@dataclass(frozen=True)
class NodeFacts:
    """What the driver checks of a node before the run: piexp's version and source
    digest, and each problem found (the sandbox, the harness), in words."""

    node: str
    version: str
    source: str
    problems: tuple[str, ...]


def node_facts(config: RunConfig) -> NodeFacts:
    """This node's facts: its sandbox started (it must run a program) and the harness's
    own checks, here (harness=pi: Pi installed from the lockfile, the languages' runtimes
    there, the run's episodes at once fitting this node's memory)."""
    import piexp
    from piexp.harness.base import refuse_unusable_harness

    problems = []
    from piexp.sandbox.launchers.bwrap import bwrap_path

    sandbox, harness = config.sandbox, config.harness

    if sandbox.kind == "embedded" and not sandbox.allow_unisolated and bwrap_path() is None:
        problems.append("bubblewrap (bwrap) is not on its PATH, so its sandbox cannot isolate programs")
    try:
        if not problems:
            node_sandbox(sandbox)
    except Exception as error:  # noqa: BLE001 - reported by the driver, naming the node
        problems.append(f"its sandbox does not start ({type(error).__name__}: {error})")
    try:
        refuse_unusable_harness(config)
    except UserError as error:
        problems.append(f"harness={harness.name} cannot run there ({error})")
    return NodeFacts(node_label(), piexp.__version__, source_digest(), tuple(problems))


@dataclass
class PlayedGroup:
    """A group's result as a node returns it: the cookbook's trajectory group (None: it
    was skipped), the records its recording stages made, where and at which attempt."""

    result: TrajectoryGroup | None
    records: list[Any]
    node: str
    attempt: int


@dataclass(frozen=True)
class _ClosingGroup(GroupWrapper):
    """The node's group: after the cookbook's cleanup, the sandbox clients are closed, as
    after an eval episode."""

    async def cleanup(self) -> None:
        from piexp.sandbox.client import close_sandbox_clients

        try:
            await self.inner.cleanup()
        finally:
            await close_sandbox_clients()


def play_group_on_node(task: Any, sandbox: SandboxSettings, attempt: int) -> PlayedGroup:
    """Play one training group here: `task` is the cookbook's rollout task whose group is
    a `NodeGroup`, played against this node's sandbox."""
    from piexp.cookbook_compat import play_rollout_task

    group = with_sandbox(task.env_group_builder, node_sandbox(sandbox))
    assert isinstance(group, NodeGroup), f"a node plays a NodeGroup, not {type(group)}"
    prepare_model(_settings_of(group).model_name)
    # What the cookbook's `_run_rollout_sync(task)` runs, in this process's one event loop
    # rather than a fresh loop per group: the harness kept for the run's episodes belongs
    # to the loop it started in, and a group played in a later loop found Pi's warm slots
    # bound to a closed one ("Event loop is closed", its episodes played again, or stuck).
    played = play_rollout_task(task, _ClosingGroup(inner=group))
    result = _loop().run_until_complete(played)
    return PlayedGroup(result, list(group.records), node_label(), attempt)


def _settings_of(group: Any) -> EpisodeSettings:
    while isinstance(group, GroupWrapper):
        group = group.inner
    return group.settings


@dataclass(frozen=True)
class PolicyRecipe:
    """How a node builds the run's policies (a scripted policy holds locks and its
    renderer, so it is built where it acts, once per process): the scripted ones by name
    from the run's tasks; `model_policy`: the driver's model policy, whose sampler
    pickles (its calls go to the run's sampler)."""

    key: str
    names: tuple[str, ...]
    renderer_name: str
    model_name: str
    tasks: tuple[Task, ...] = ()
    model_policy: TokenCompleter | None = None

    async def build(self) -> Mapping[str, TokenCompleter]:
        prepare_model(self.model_name)
        if self.model_policy is not None:
            return {"model": self.model_policy}
        from piexp.env.episode import get_run_renderer
        from piexp.policies import make_policy

        renderer = get_run_renderer(self.renderer_name, self.model_name)
        return {name: make_policy(name, renderer, self.tasks) for name in self.names}


_policies: dict[str, Mapping[str, TokenCompleter]] = {}  # this process's, by recipe key
_harnesses: dict[str, Any] = {}  # this process's harness (its sandbox shared), by settings
# This process's episodes play in one event loop, kept for its life: a harness kept across
# episodes (Pi's warm slots, their streams and processes) belongs to the loop it started in.
_episode_loop: asyncio.AbstractEventLoop | None = None


def _loop() -> asyncio.AbstractEventLoop:
    global _episode_loop
    if _episode_loop is None or _episode_loop.is_closed():
        _episode_loop = asyncio.new_event_loop()
        asyncio.set_event_loop(_episode_loop)
    return _episode_loop


def play_episode_on_node(
    recipe: Sequence[Any],
    policy_name: str,
    task: Task,
    language: str,
    settings: EpisodeSettings,
    sample: int,
    sandbox: SandboxSettings,
    harness: HarnessSettings,
) -> EpisodeRecord:
    """Play one eval or check episode here; `recipe` holds the `PolicyRecipe`'s object
    ref (in a list, so that Ray hands the ref over, fetched once per process)."""
    import ray

    (ref,) = recipe
    settings = dataclasses.replace(settings, sandbox_url=node_sandbox(sandbox))

    async def play() -> EpisodeRecord:
        from piexp.sandbox.client import close_sandbox_clients

        key = ref.hex()
        if key not in _policies:
            _policies[key] = await ray.get(ref).build()
        policy = _policies[key][policy_name]
        try:
            from piexp.harness.base import make_harness

            key = harness.model_dump_json()
            if key not in _harnesses:
                _harnesses[key] = make_harness(harness)
            return await _harnesses[key].play(policy, policy_name, task, language, settings, sample=sample)
        finally:
            await close_sandbox_clients()

    record = _loop().run_until_complete(play())
    if record.transcript is not None:
        record.transcript["node"] = node_label()
    return record
