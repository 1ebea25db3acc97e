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
import contextlib
import dataclasses
import os
import socket
import threading
import uuid
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from piexp.config.rollouts import RayRollouts, RolloutSettings
from piexp.config.schema import RunConfig
from piexp.console import say
from piexp.errors import RunIncompleteError, UserError
from piexp.launch.ray_ledger import GroupKey, GroupLedger

if TYPE_CHECKING:  # imported where used: they load tinker-cookbook, which a run without Ray may not need yet
    from piexp.launch.ray_nodes import NodeFacts, PlayedGroup, PolicyRecipe
    from piexp.policies.rollout import EpisodeRecord

__all__ = ["RayEpisodePlay", "RayGroupExecutor", "RaySession", "close_rollouts", "open_rollouts"]

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


class RaySessionClosed(Exception):
    """A group's thread found the run's Ray session closed (the run is ending: Ctrl-C)."""


class RaySession:
    """The run's connection to its cluster (one per process, `open_rollouts`). Threads
    that wait on the cluster do so through `using_ray` and `result`, so that `close`
    (Ctrl-C) can end the connection while they wait: a Ray call after `ray.shutdown`
    ends the whole process with exit 1."""

    def __init__(self, settings: RayRollouts, run_key: str) -> None:
        self.settings = settings
        self.run_key = run_key
        self.ray = import_ray()
        self.started_here = settings.address is None
        self._remote: dict[str, Any] = {}
        self._calls = threading.Condition()
        self._calling = 0
        self._closing = False
        self._waited: set[Any] = set()

    @contextlib.contextmanager
    def using_ray(self) -> Iterator[Any]:
        with self._calls:
            if self._closing:
                raise RaySessionClosed("the run's Ray session is closed")
            self._calling += 1
        try:
            yield self.ray
        finally:
            with self._calls:
                self._calling -= 1
                self._calls.notify_all()

    def result(self, ref: Any) -> Any:
        """`ray.get(ref)`, waited for in half-second slices that `close` can end."""
        with self._calls:
            self._waited.add(ref)
        try:
            while True:
                with self.using_ray() as ray:
                    if ray.wait([ref], timeout=0.5)[0]:
                        return ray.get(ref)
        finally:
            with self._calls:
                self._waited.discard(ref)

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
        with self._calls:
            self._closing = True
            waited = list(self._waited)
            self._calls.wait_for(lambda: self._calling == 0, timeout=5.0)
        for ref in waited:  # the groups still playing stop now, with their workers
            with contextlib.suppress(Exception):
                self.ray.cancel(ref, force=True)
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
        say(f"checking {len(nodes)} Ray node(s) before any episode (each starts a worker for it)")
        probe = self.remote(node_facts)
        refs = [
            probe.options(
                num_cpus=0, max_retries=0,
                scheduling_strategy=NodeAffinitySchedulingStrategy(node["NodeID"], soft=False),
            ).remote(config)
            for node in nodes
        ]  # fmt: skip
        import piexp

        timeout_s = self.settings.node_check_timeout_s
        _, waiting = self.ray.wait(refs, num_returns=len(refs), timeout=timeout_s)
        if waiting:
            silent = [_node_name(node) for node, ref in zip(nodes, refs, strict=True) if ref in waiting]
            raise UserError(
                f"{len(silent)} of the Ray cluster's {len(nodes)} node(s) did not answer piexp's node check within "
                f"{timeout_s:g} s: {', '.join(silent)}. A node starts a worker for the check, which takes longer "
                "on a busy machine; raise rollouts.node_check_timeout_s, or read that node's raylet log (its "
                "/tmp/ray/session_latest/logs/raylet.out) and stop it if it is stuck. No episode was played and nothing "
                "of the run was written."
            )
        facts: list[NodeFacts] = []
        gone = self.ray.exceptions.TaskUnschedulableError, *_node_lost_errors(self.ray)
        for node, ref in zip(nodes, refs, strict=True):
            try:
                facts.append(self.ray.get(ref))
            except gone:  # it died after the cluster listed it alive: it plays nothing
                say(f"Ray node {_node_name(node)} left the cluster before its check; playing on the others")
        if not facts:
            raise UserError(f"Every node of the Ray cluster at {self.settings.address} left it during piexp's node "
                            "check; nothing of the run was written. Start the cluster's nodes again (docs/cluster.md).")  # fmt: skip
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


def _node_name(node: dict[str, Any]) -> str:
    return f"{node.get('NodeManagerAddress', '?')} ({str(node.get('NodeID', '?'))[:12]})"


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


class RayGroupExecutor(concurrent.futures.Executor):
    """The cookbook's rollout executor (`rl.train.main(rollout_executor=...)`): each
    training group is played on a node, at most `max_groups_in_flight` at once."""

    def __init__(self, session: RaySession, config: RunConfig) -> None:
        self.session = session
        self.config = config
        self.ledger = GroupLedger()
        # A group's records are written from its own thread: one group's at a time, as the
        # local loop's single thread writes them (the stages' files are not thread-safe).
        self._committing = threading.Lock()
        self._threads = concurrent.futures.ThreadPoolExecutor(
            max_workers=session.settings.max_groups_in_flight, thread_name_prefix="ray-group"
        )

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> concurrent.futures.Future[Any]:
        from piexp.env.training_pipeline import TrainingGroup

        builder = getattr(args[0], "env_group_builder", None) if len(args) == 1 and not kwargs else None
        if builder is None:
            return self._threads.submit(fn, *args, **kwargs)  # not a group's rollout
        if not isinstance(builder, TrainingGroup):
            return self._play_here(fn, args[0])
        return self._threads.submit(self._play, args[0], builder)

    def _play_here(self, fn: Callable[..., Any], task: Any) -> concurrent.futures.Future[Any]:
        """A group that is not a training group (an evaluation during training) plays on
        this machine, in the event loop that hands it over, as it would with no executor:
        the run's harness keeps its Pi slots in that loop, and a group played in a fresh
        loop of a thread of its own found them bound to another loop and never ended."""
        from piexp.cookbook_compat import play_rollout_task

        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # not called from a loop: nothing of the run's is bound to one
            return self._threads.submit(fn, task)
        return asyncio.run_coroutine_threadsafe(play_rollout_task(task), loop)

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
            with self.session.using_ray():
                ref = (
                    self.session.remote(play_group_on_node)
                    .options(**self.session.group_options())
                    .remote(sent, self.config.sandbox, attempt)
                )
            try:
                played: PlayedGroup = self.session.result(ref)
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
            with self._committing:
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
