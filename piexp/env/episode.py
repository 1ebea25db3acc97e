"""Build one episode (a tinker-cookbook Env) and groups of them."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, ClassVar, Literal, Protocol

import tinker
from tinker_cookbook import model_info, renderers, tokenizer_utils
from tinker_cookbook.renderers.base import Message
from tinker_cookbook.rl.rollout_presets import RolloutConfig
from tinker_cookbook.rl.types import Env, EnvGroupBuilder
from tinker_cookbook.tool_use import build_agent_tool_env

from piexp.config.schema import LanguageSettings, Limits, RewardSettings
from piexp.cookbook_compat import RenderHookEnv, adopt_env_class
from piexp.env.prompt import workspace_prompt
from piexp.env.reward import PASSED_METRIC, WorkspaceReward
from piexp.env.sampled_context import spliced_observation
from piexp.env.tools import WorkspaceTools
from piexp.sandbox.availability import restarts, wait_for_sandbox
from piexp.tasks import Task


@dataclass(frozen=True)
class EpisodeSettings:
    """Everything an episode needs besides its task and language; picklable."""

    model_name: str
    renderer_name: str | None
    languages: dict[str, LanguageSettings]
    limits: Limits
    reward: RewardSettings
    sandbox_url: str
    memory_limit_mb: int | None = None
    # The cookbook RolloutConfig of the run (piexp.env.rollout_policy); None = the model's default.
    rollout: RolloutConfig | None = None
    # A training episode whose program the sandbox could not run: "penalize" scores it
    # (reward.weights.infrastructure_error); otherwise it raises InfrastructureFailure for
    # the rollout strategy to retry or mask. Evaluation episodes always raise.
    infrastructure_errors: Literal["retry", "mask", "penalize"] = "retry"
    # How long a sandbox that does not answer is waited for before the run stops.
    sandbox_wait_s: float = 60.0

    def resolved_renderer_name(self) -> str:
        return self.renderer_name or model_info.get_recommended_renderer_name(self.model_name)


@lru_cache(maxsize=8)
def get_run_renderer(renderer_name: str, model_name: str) -> renderers.Renderer:
    """One renderer per (renderer, model) per process; the offline Qwen3 tokenizer is
    registered first so no tokenizer is fetched from a hub."""
    from piexp.tokenizer import register_offline_tokenizers

    register_offline_tokenizers()
    return renderers.get_renderer(renderer_name, tokenizer_utils.get_tokenizer(model_name))


class InfrastructureFailure(Exception):
    """The sandbox could not run an episode's program (not the program's fault): the
    episode has no outcome to score. An eval or check plays it again; training retries,
    masks or (`algo.infrastructure_errors=penalize`) scores it instead of raising."""


class WorkspaceEnv(RenderHookEnv):
    """tinker-cookbook's `EnvFromMessageEnv`, rendering on the loop what needs little
    tokenizing.

    The cookbook renders every observation (the whole conversation) in a worker thread,
    so that tokenizing does not stall the event loop (the Rust tokenizer releases the
    GIL there). piexp's tokenizer memoises `encode` (`piexp.tokenizer.EncodeCache`), so
    a re-render mostly tokenizes nothing new: it is Python work, which holds the GIL in
    a thread as much as on the loop, and the two thread hops cost more than the render
    (bench/rollouts.py: about 1 ms a hop on a busy machine). So a render is first tried
    inline under the tokenizer's `encode_budget(inline_encode_chars)`; if it needed to
    tokenize more new text than that, it is discarded and done in a thread as before.
    The observation is the same either way.

    After the first, an observation continues the tokens the model saw and sampled
    (piexp.env.sampled_context), so that an episode trains as one sequence.
    """

    inline_encode_chars: ClassVar[int] = 2048
    # The last observation rendered and, during a step, the action sampled from it (set
    # on the instance; the class is adopted without __init__, so these are the defaults).
    _seen: tinker.ModelInput | None = None
    _action: list[int] | None = None
    # The episode's workspace, and whether a sandbox failure raises (build_workspace_env).
    _workspace: WorkspaceTools | None = None
    _raise_infrastructure_failures: bool = True
    _sandbox_wait_s: float = 60.0

    async def step(self, action: Any, *, extra: Any = None) -> Any:
        self._action = list(action)
        try:
            result = await super().step(action, extra=extra)
        finally:
            self._action = None
        await self._check_infrastructure()
        if result.episode_done:
            result.metrics[PASSED_METRIC] = float(result.metrics.get("functional_correct", 0.0) == 1.0)
        if result.episode_done and self._workspace is not None:
            # Restarts of the run's sandbox so far; the trainer logs its mean per step.
            result.metrics["sandbox_restarts"] = float(restarts(self._workspace.sandbox_url))
        return result

    async def _check_infrastructure(self) -> None:
        """After a step whose program the sandbox could not run: stop the run if the
        sandbox is gone for good (`SandboxDown`, after waiting for it), else raise
        `InfrastructureFailure` unless this episode is to be scored as it is."""
        workspace = self._workspace
        if workspace is None or workspace.infrastructure_failure is None:
            return
        await wait_for_sandbox(workspace.sandbox_url, self._sandbox_wait_s)
        if self._raise_infrastructure_failures:
            raise InfrastructureFailure(workspace.infrastructure_failure)

    async def render(self, messages: list[Message], **kwargs: Any) -> tinker.ModelInput:
        observation = await self._render_canonical(messages, **kwargs)
        if self._action is not None and self._seen is not None and not kwargs:
            spliced = spliced_observation(self.renderer, messages, observation, self._seen, self._action)
            observation = observation if spliced is None else spliced
        self._seen = observation
        return observation

    async def _render_canonical(self, messages: list[Message], **kwargs: Any) -> tinker.ModelInput:
        encode_budget = getattr(self.renderer.tokenizer, "encode_budget", None)
        if encode_budget is not None:
            budget = encode_budget(self.inline_encode_chars)
            try:
                with budget:
                    rendered = self.renderer.build_generation_prompt(messages, **kwargs)
            except Exception:
                if not budget.missed:
                    raise
            else:
                if not budget.missed:
                    return rendered
        return await self.render_in_thread(messages, **kwargs)


def build_workspace_env(
    *,
    task: Task,
    language: str,
    settings: EpisodeSettings,
    renderer: renderers.Renderer,
    evaluation: bool,
) -> Env:
    spec = settings.languages[language]
    workspace = WorkspaceTools(
        task,
        spec,
        settings.sandbox_url,
        settings.limits.sandbox_timeout_s,
        language_name=language,
        stdout_chars=settings.reward.stdout_chars,
        stderr_chars=settings.reward.stderr_chars,
        memory_limit_mb=settings.memory_limit_mb,
    )
    tools = workspace.all_tools()
    prefix = renderer.create_conversation_prefix_with_tools(tools=workspace.tool_specs(tools))
    binary = evaluation or settings.reward.mode == "binary"
    environment = build_agent_tool_env(
        renderer=renderer,
        tools=tools,
        initial_messages=prefix + [{"role": "user", "content": workspace_prompt(task, language, spec)}],
        reward_fn=WorkspaceReward(task.answer, settings.reward.weights, binary=binary),
        model_name=settings.model_name,
        rollout_config=settings.rollout,
        max_turns=settings.limits.max_turns,
        max_tool_calls=settings.limits.max_tool_calls,
        max_trajectory_tokens=settings.limits.max_trajectory_tokens,
        max_generation_tokens=settings.limits.max_generation_tokens,
        context_overflow_reward=settings.reward.context_overflow_reward,
    )
    environment.example_id = f"{task.task_id}:{language}"
    # Same object and state, plus the inline rendering of small turns (see above).
    adopted = adopt_env_class(environment, WorkspaceEnv)
    if isinstance(adopted, WorkspaceEnv):
        adopted._workspace = workspace
        adopted._raise_infrastructure_failures = evaluation or settings.infrastructure_errors != "penalize"
        adopted._sandbox_wait_s = settings.sandbox_wait_s
    return adopted


class EpisodeEnvFactory(Protocol):
    """Builds one episode's `Env`: `build_workspace_env` (the reference environment), or
    a harness's `training_env` (piexp.harness.base.Harness), which the training run's
    dataset builder passes in from the layer above."""

    def __call__(
        self, task: Task, language: str, settings: EpisodeSettings, renderer: renderers.Renderer, *, evaluation: bool
    ) -> Env: ...


def reference_env(
    task: Task, language: str, settings: EpisodeSettings, renderer: renderers.Renderer, *, evaluation: bool
) -> Env:
    """The reference environment's episode (`build_workspace_env`) as an `EpisodeEnvFactory`."""
    return build_workspace_env(
        task=task, language=language, settings=settings, renderer=renderer, evaluation=evaluation
    )


@dataclass(frozen=True)
class WorkspaceGroupBuilder(EnvGroupBuilder):
    """`group_size` episodes of one (task, language); evaluation groups grade binary.
    `episode_env` builds each episode (the reference environment unless a harness's)."""

    task: Task
    language: str
    settings: EpisodeSettings
    group_size: int
    evaluation: bool = False
    episode_env: EpisodeEnvFactory = reference_env

    async def make_envs(self) -> Sequence[Env]:
        renderer = get_run_renderer(self.settings.resolved_renderer_name(), self.settings.model_name)
        return [
            self.episode_env(self.task, self.language, self.settings, renderer, evaluation=self.evaluation)
            for _ in range(self.group_size)
        ]

    def logging_tags(self) -> list[str]:
        return ["pi_workspace", self.task.family, self.task.split, self.language]
