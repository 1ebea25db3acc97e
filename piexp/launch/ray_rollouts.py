"""`rollouts=ray`: a run's episodes played on the nodes of a Ray cluster (the `ray` extra).

The driver (this process) joins the cluster named by `rollouts.address`, or starts one
on this machine for the run, and before anything of the run is written asks every node
that may play (`rollouts.node_resource`) for piexp's version, its sandbox and its
harness (`check_nodes`). Training hands the cookbook's loop a `RayGroupExecutor`: its
unit is a group, sent with the run's sampler (the Tinker SamplingClient pickles) to a
node, played there against that node's sandbox (`piexp.launch.ray_nodes`), and returned
with the records its recording stages made. Eval and check send each episode the same
way (`RayEpisodePlay`).

Exactly once: every group has a key (run, step, group index) and an attempt number. A
group lost with its node (or its worker) is sent again, up to `rollouts.group_retries`
times; the driver keeps the first complete result of a key and drops any later copy
(`GroupLedger`), and only then writes the group's records, so nothing of a lost or
copied attempt reaches the run folder. Past the budget a group is handled as
`algo.infrastructure_errors` says: `retry` stops the run (resumable), `mask` and
`penalize` drop the group; it is never scored. Each step's metrics count the attempts."""

from __future__ import annotations

import asyncio
import concurrent.futures
import dataclasses
import os
import socket
import threading
import uuid
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from piexp.config.rollouts import RayRollouts, RolloutSettings
from piexp.config.schema import RunConfig
from piexp.console import say
from piexp.errors import RunIncompleteError, UserError

if TYPE_CHECKING:  # imported where used: they load tinker-cookbook, which a run without Ray may not need yet
    from piexp.launch.ray_nodes import NodeFacts, PlayedGroup, PolicyRecipe
    from piexp.policies.rollout import EpisodeRecord

__all__ = ["GroupLedger", "RayEpisodePlay", "RayGroupExecutor", "RaySession", "close_rollouts", "open_rollouts"]

RAY_VERSION = "2.60.0"
# Each group asks this much of `rollouts.node_resource`, which a node has 1 of.
NODE_RESOURCE_PER_GROUP = 0.001
INSTALL_HINT = f'pip install -e ".[ray]" (ray=={RAY_VERSION}; `make setup` installs it)'


def import_ray() -> Any:
    try:
        import ray
    except ImportError:
        raise UserError(
            f"rollouts=ray plays the run's episodes on a Ray cluster, but Ray is not installed in this "
            f"environment. Install piexp's ray extra: {INSTALL_HINT}; or use rollouts=local."
        ) from None
    return ray


def _node_lost_errors(ray: Any) -> tuple[type[BaseException], ...]:
    names = ("WorkerCrashedError", "NodeDiedError", "ObjectLostError", "LocalRayletDiedError", "OwnerDiedError")
    return tuple(getattr(ray.exceptions, name) for name in names if hasattr(ray.exceptions, name))


def _reachable(host: str, port: int, timeout_s: float) -> str | None:
    """None when something accepts connections at host:port, else why not."""
    try:
        with socket.create_connection((host, port), timeout=timeout_s):
            return None
    except OSError as error:
        return str(error) or type(error).__name__


def _refuse_unreachable(address: str, timeout_s: float) -> None:
    """Within seconds: a cluster address nothing answers at is refused (no cluster is
    started in its place)."""
    shown = address
    if address == "auto":
        address = os.environ.get("RAY_ADDRESS", "")
        current = Path("/tmp/ray/ray_current_cluster")
        if not address and current.exists():
            address = current.read_text().strip()
        if not address:
            raise UserError(
                "rollouts.address=auto found no Ray cluster on this machine (no RAY_ADDRESS and no running "
                "`ray start`). Start one (ray start --head on this machine, docs/cluster.md), give its address "
                "(rollouts.address=HOST:PORT), or leave rollouts.address null to start one for the run."
            )
    host, _, port = address.removeprefix("ray://").rpartition(":")
    why = _reachable(host, int(port), min(timeout_s, 5.0))
    if why is not None:
        raise UserError(
            f"No Ray cluster answers at rollouts.address={shown} ({host}:{port}: {why}). Start the cluster's head "
            f"there (ray start --head --port={port}, docs/cluster.md), fix rollouts.address, or leave it null "
            "to start a cluster on this machine for the run."
        )


def refuse_unusable_rollouts(settings: RolloutSettings) -> None:
    """Before a run's folder is made: `rollouts=ray` needs Ray, and a cluster at its
    address (a node's own check needs the connection: the job makes it)."""
    if isinstance(settings, RayRollouts):
        import_ray()
        if settings.address is not None:
            _refuse_unreachable(settings.address, settings.connect_timeout_s)


class RaySession:
    """The run's connection to its cluster (one per process, `open_rollouts`)."""

    def __init__(self, settings: RayRollouts, run_key: str) -> None:
        self.settings = settings
        self.run_key = run_key
        self.ray = import_ray()
        self.started_here = settings.address is None
        self._remote: dict[str, Any] = {}

    def connect(self) -> None:
        ray, settings = self.ray, self.settings
        if settings.address is None:
            cpus = settings.local_cpus or os.cpu_count() or 1
            resources = {settings.node_resource: float(cpus)} if settings.node_resource else None
            # address="local": always a fresh cluster, never one left behind in /tmp.
            ray.init(address="local", num_cpus=cpus, resources=resources, include_dashboard=False,
                     log_to_driver=False, configure_logging=False)  # fmt: skip
            return
        _refuse_unreachable(settings.address, settings.connect_timeout_s)
        ray.init(address=settings.address, log_to_driver=False, configure_logging=False)

    def close(self) -> None:
        if self.ray.is_initialized():
            self.ray.shutdown()  # a cluster started for the run stops with it

    def remote(self, function: Callable[..., Any]) -> Any:
        if function.__name__ not in self._remote:
            self._remote[function.__name__] = self.ray.remote(function)
        return self._remote[function.__name__]

    def group_options(self) -> dict[str, Any]:
        """Where and with what a group (or an eval or check episode) is played."""
        settings = self.settings
        options: dict[str, Any] = {
            "num_cpus": settings.cpus_per_group,
            "max_retries": 0,  # the driver plays a lost group again itself, counting attempts
            "scheduling_strategy": "SPREAD" if settings.spread else "DEFAULT",
        }
        if settings.memory_mb_per_group is not None:
            options["memory"] = settings.memory_mb_per_group * 1024 * 1024
        if settings.node_resource:
            options["resources"] = {settings.node_resource: NODE_RESOURCE_PER_GROUP}
        return options

    def playing_nodes(self) -> list[dict[str, Any]]:
        name = self.settings.node_resource
        return [
            node
            for node in self.ray.nodes()
            if node.get("Alive") and (name is None or node.get("Resources", {}).get(name, 0) > 0)
        ]

    def check_nodes(self, config: RunConfig) -> list[NodeFacts]:
        """Every node that may play, asked before any episode; a node that cannot is
        refused in one paragraph naming it and the fix."""
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        from piexp.launch.ray_nodes import node_facts, source_digest

        nodes = self.playing_nodes()
        if not nodes:
            where = f"with the resource {self.settings.node_resource}" if self.settings.node_resource else ""
            raise UserError(
                f"The Ray cluster at {self.settings.address or 'this machine'} has no live node {where} to play "
                f"episodes on. Start each piexp node with ray start --address=HEAD:PORT "
                f"--resources='{{\"{self.settings.node_resource}\": 1}}' (docs/cluster.md), or set "
                "rollouts.node_resource=null to play on any node."
            )
        probe = self.remote(node_facts)
        refs = [
            probe.options(
                num_cpus=0, max_retries=0,
                scheduling_strategy=NodeAffinitySchedulingStrategy(node["NodeID"], soft=False),
            ).remote(config)
            for node in nodes
        ]  # fmt: skip
        import piexp

        facts: list[NodeFacts] = self.ray.get(refs, timeout=max(self.settings.connect_timeout_s, 60.0))
        for fact in facts:
            problems = list(fact.problems)
            if (fact.version, fact.source) != (piexp.__version__, source_digest()):
                problems.insert(0, f"it runs piexp {fact.version} (source {fact.source}), not this machine's "
                                   f"piexp {piexp.__version__} (source {source_digest()})")  # fmt: skip
            if problems:
                raise UserError(
                    f"Ray node {fact.node} cannot play this run's episodes: {'; '.join(problems)}. Run `make setup` "
                    "in the same piexp checkout on that node (and restart its `ray start`), or stop that node; "
                    "nothing of the run was written."
                )
        return facts


_session: RaySession | None = None


def open_rollouts(config: RunConfig, run_dir: Path) -> RaySession | None:
    """With `rollouts=ray`: join (or start) the cluster and check its nodes, before the
    run folder is written; the session lasts until `close_rollouts`."""
    global _session
    settings = config.rollouts
    if not isinstance(settings, RayRollouts):
        return None
    session = RaySession(settings, run_key=f"{run_dir}#{uuid.uuid4().hex[:8]}")
    _session = session
    try:
        session.connect()
        facts = session.check_nodes(config)
    except BaseException:
        close_rollouts()
        raise
    say(f"rollouts on Ray: {len(facts)} node(s) ready ({', '.join(fact.node for fact in facts)})")
    return session


def current_session() -> RaySession | None:
    return _session


def close_rollouts() -> None:
    global _session
    if _session is not None:
        _session.close()
        _session = None


GroupKey = tuple[str, int, int]  # (run, step, group index)


class GroupLedger:
    """Which result of each group the run keeps: the first complete one of a key; later
    copies are dropped. Counts each step's attempts, replays, losses and drops."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._accepted: dict[GroupKey, tuple[int, str]] = {}
        self._attempts: dict[GroupKey, int] = {}
        self._steps: dict[int, Counter[str]] = {}
        self._nodes: dict[int, set[str]] = {}

    def _count(self, key: GroupKey, name: str) -> None:
        self._steps.setdefault(key[1], Counter())[name] += 1

    def next_attempt(self, key: GroupKey) -> int:
        with self._lock:
            attempt = self._attempts[key] = self._attempts.get(key, 0) + 1
            self._count(key, "attempts")
            if attempt > 1:
                self._count(key, "attempts_again")
            return attempt

    def lost(self, key: GroupKey, given_up: bool) -> None:
        with self._lock:
            self._count(key, "attempts_lost")
            if given_up:
                self._count(key, "groups_lost")

    def accept(self, key: GroupKey, played: PlayedGroup) -> bool:
        """Whether `played` is the key's result to keep (its first complete one)."""
        with self._lock:
            if key in self._accepted:
                self._count(key, "copies_dropped")
                return False
            self._accepted[key] = (played.attempt, played.node)
            self._count(key, "groups")
            self._nodes.setdefault(key[1], set()).add(played.node)
            return True

    def accepted(self) -> dict[GroupKey, tuple[int, str]]:
        with self._lock:
            return dict(self._accepted)

    def step_metrics(self, step: int) -> dict[str, float]:
        with self._lock:
            counts = self._steps.get(step)
            if counts is None:
                return {}
            names = ("groups", "attempts", "attempts_again", "attempts_lost", "groups_lost", "copies_dropped")
            metrics = {f"rollouts/{name}": float(counts.get(name, 0)) for name in names}
            metrics["rollouts/nodes"] = float(len(self._nodes.get(step, ())))
            return metrics


class RayGroupExecutor(concurrent.futures.Executor):
    """The cookbook's rollout executor (`rl.train.main(rollout_executor=...)`): each
    training group is played on a node, at most `max_groups_in_flight` at once."""

    def __init__(self, session: RaySession, config: RunConfig) -> None:
        self.session = session
        self.config = config
        self.ledger = GroupLedger()
        self._threads = concurrent.futures.ThreadPoolExecutor(
            max_workers=session.settings.max_groups_in_flight, thread_name_prefix="ray-group"
        )

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> concurrent.futures.Future[Any]:
        from piexp.env.training_pipeline import TrainingGroup

        builder = getattr(args[0], "env_group_builder", None) if len(args) == 1 and not kwargs else None
        if not isinstance(builder, TrainingGroup):
            return self._threads.submit(fn, *args, **kwargs)  # not a training group: played here
        return self._threads.submit(self._play, args[0], builder)

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        self._threads.shutdown(wait=wait, cancel_futures=cancel_futures)

    def _play(self, task: Any, group: Any) -> Any:
        from piexp.launch.ray_nodes import play_group_on_node

        ray = self.session.ray
        key: GroupKey = (self.session.run_key, group.step, group.group)
        client = task.sampling_client
        if callable(getattr(client, "result", None)):
            client = client.result()  # the cookbook may hand over the client's future: send the client
        sent = dataclasses.replace(task, sampling_client=client, env_group_builder=group.for_node())
        budget = self.session.settings.group_retries
        while True:
            attempt = self.ledger.next_attempt(key)
            ref = (
                self.session.remote(play_group_on_node)
                .options(**self.session.group_options())
                .remote(sent, self.config.sandbox, attempt)
            )
            try:
                played: PlayedGroup = ray.get(ref)
            except _node_lost_errors(ray) as error:
                given_up = attempt > budget
                self.ledger.lost(key, given_up)
                if given_up:
                    return self._give_up(group, attempt, error)
                say(
                    f"step {group.step} group {group.group}: attempt {attempt} was lost with its node; playing it again"
                )
                continue
            except ray.exceptions.RayTaskError as error:
                raise error.as_instanceof_cause() from None  # the node's own error (sandbox down, service)
            if not self.ledger.accept(key, played):
                return None  # a later copy of a group already kept
            group.commit(played.records, played.node)
            return played.result

    def _give_up(self, group: Any, attempts: int, error: BaseException) -> None:
        what = (
            f"step {group.step} group {group.group} was lost with its node {attempts} times "
            f"(rollouts.group_retries={self.session.settings.group_retries}; last: {type(error).__name__})"
        )
        if self.config.algo.infrastructure_errors == "retry":
            raise RunIncompleteError(
                f"Training stopped: {what}. No episode of it was scored. Run the same command again to resume "
                "from the last checkpoint once the cluster's nodes are healthy."
            )
        say(f"{what}: dropped (algo.infrastructure_errors={self.config.algo.infrastructure_errors}), never scored")
        return None


class RayEpisodePlay:
    """An eval or check episode played on a node (`piexp.launch.episodes.PlayEpisode`):
    the policies are built there from `recipe`; a lost episode is played again up to
    `rollouts.group_retries` times, then reported as not run (never scored)."""

    def __init__(self, session: RaySession, config: RunConfig, recipe: PolicyRecipe) -> None:
        self.session = session
        self.config = config
        self.recipe_ref = session.ray.put(recipe)
        self.in_flight = asyncio.Semaphore(session.settings.max_groups_in_flight)

    async def __call__(
        self, policy: Any, policy_name: str, task: Any, language: str, settings: Any, *, sample: int = 0,
        **_: Any,
    ) -> EpisodeRecord:  # fmt: skip
        from piexp.launch.ray_nodes import play_episode_on_node
        from piexp.policies.rollout import EpisodeRecord

        ray = self.session.ray
        remote = self.session.remote(play_episode_on_node).options(**self.session.group_options())
        error: BaseException | None = None
        for _attempt in range(self.session.settings.group_retries + 1):
            async with self.in_flight:
                ref = remote.remote(
                    [self.recipe_ref], policy_name, task, language, settings, sample, self.config.sandbox,
                    self.config.harness,
                )  # fmt: skip
                try:
                    return await asyncio.wrap_future(ref.future())
                except _node_lost_errors(ray) as lost:
                    error = lost
                except ray.exceptions.RayTaskError as failed:
                    raise failed.as_instanceof_cause() from None
        record = EpisodeRecord.of(policy_name, task, language, sample)
        record.error = f"lost with its Ray node {self.session.settings.group_retries + 1} times ({error})"
        record.infrastructure_failure = True
        return record


def episode_play(
    config: RunConfig, play: Callable[..., Any], names: Sequence[str], tasks: Sequence[Any],
    model_policy: Any | None = None,
) -> Callable[..., Any]:  # fmt: skip
    """`play` with `rollouts=local`; with `rollouts=ray`, the same episodes on the nodes."""
    session = current_session()
    if session is None:
        return play
    from piexp.env.dataset import episode_settings
    from piexp.launch.ray_nodes import PolicyRecipe

    recipe = PolicyRecipe(
        key=uuid.uuid4().hex,
        names=tuple(names),
        renderer_name=episode_settings(config, "").resolved_renderer_name(),
        model_name=config.model.name,
        tasks=tuple(tasks),
        model_policy=model_policy,
    )
    return RayEpisodePlay(session, config, recipe)


def group_executor(config: RunConfig) -> RayGroupExecutor | None:
    session = current_session()
    return RayGroupExecutor(session, config) if session is not None else None
