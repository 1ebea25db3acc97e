"""A Pi episode as a tinker-cookbook `Env`, so the RL loop trains in the real Pi.

The loop drives an `Env` (observation, sample, step, ...) while Pi drives its own run
(it sends a chat request and waits for the answer). `PiEpisodeEnv` joins the two: its
first observation starts the episode (`PiHarness.play_responder`) and waits for Pi's
first request; each request, rendered with the run's renderer (`Observations`), is an
observation; each sampled action is parsed (`answer_message`) and sent back to Pi as its
answer; when Pi ends, the last step is done, with the reward graded from what Pi did
(`piexp.harness.pi.trace`). The episode is the same one `mode=eval harness=pi` plays,
limits, sandbox and grading included.

Token-exact: an observation is exactly the tokens the model is sampled on and an action
exactly the tokens it sampled. An observation extends the previous one plus the action
wherever Pi's re-sent history allows (`Observations`); where it does not, the cookbook's `trajectory_to_data` starts a new
sequence there (it merges turns only while each observation extends the previous one), so
no token the model did not sample is trained on; the episode's `sequence_splits` metric
counts those places.

Ends: Pi's run over (graded: reward, metrics), or a failure of piexp's own parts (Pi
crashed, its sandbox failed: `InfrastructureFailure`, retried or masked by the rollout
strategy as for the reference environment, or scored with
`reward.weights.infrastructure_error` under `algo.infrastructure_errors=penalize`). A
malformed tool call, a turn cut at the generation limit and a prompt past the trajectory
limit end as in the reference environment (`piexp.harness.pi.scoring`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

import tinker
from tinker_cookbook import renderers
from tinker_cookbook.completers import TokensWithLogprobs
from tinker_cookbook.renderers.base import Message
from tinker_cookbook.rl.types import Env, InitialObservationOverflow, StepResult, Trajectory, Transition

from piexp.config.schema import RunConfig
from piexp.env.episode import EpisodeSettings, InfrastructureFailure
from piexp.env.reward import PASSED_METRIC, REWARD_METRICS
from piexp.harness.endpoint import LimitReached, PlaysThroughEndpoint
from piexp.harness.pi.model import (
    CUT,
    UNPARSED,
    ModelView,
    Observations,
    SampledCall,
    answer_message,
    assistant_message,
    sequence_splits,
)
from piexp.harness.pi.scoring import ENDING_METRICS, MAX_TOKENS, PARSE_ERROR, retry_messages, scoring_rule
from piexp.harness.pi.scripted import ScriptedResponder, VerifiedTaskResponder
from piexp.policies.rollout import EpisodeRecord
from piexp.pretrain.data import CONCURRENT_EPISODES
from piexp.policies.scripted import ScriptedPolicy, render_assistant_tokens
from piexp.tasks import Task

TRAIN_POLICY = "model"  # the policy name a sampled episode is recorded under


class _Request:
    """One of Pi's requests, waiting for the loop's action."""

    def __init__(self, body: dict[str, Any], observation: tinker.ModelInput) -> None:
        self.body = body
        self.observation = observation
        self.answer: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()


class PiEpisodeEnv(Env):
    """One Pi episode, stepped by the RL loop. `played` is the episode's record (with its
    transcript and each call's tokens) once Pi has ended."""

    def __init__(
        self,
        harness: PlaysThroughEndpoint,
        task: Task,
        language: str,
        settings: EpisodeSettings,
        renderer: renderers.Renderer,
        *,
        evaluation: bool,
    ) -> None:
        self.harness = harness
        self.task = task
        self.language = language
        self.settings = settings
        self.renderer = renderer
        self.evaluation = evaluation
        self.calls: list[SampledCall] = []
        self.observations = Observations(renderer)
        self.scoring = scoring_rule(settings)
        self.view = ModelView()  # the episode as the model saw it, for its transcript
        self._extra: list[Message] = []  # turns piexp answered itself since Pi's last request
        self.played: EpisodeRecord | None = None
        self._events: asyncio.Queue[_Request | EpisodeRecord | BaseException] | None = None
        self._pending: _Request | None = None
        self._episode: asyncio.Task[None] | None = None

    @property
    def stop_condition(self) -> list[int] | list[str]:
        return self.renderer.get_stop_sequences()

    async def initial_observation(self) -> tuple[tinker.ModelInput, Any] | InitialObservationOverflow:
        self._events = asyncio.Queue()
        self._episode = asyncio.create_task(self._play())
        event = await self._next()
        if not isinstance(event, _Request):
            if self.scoring.stop == MAX_TOKENS and not event.error:
                # Its first prompt past the trajectory limit: not sampled, as the
                # reference environment ends it (the cookbook's sentinel for that end).
                self.played = event
                self.scoring.settle(event)
                return InitialObservationOverflow(
                    reward=self.scoring.rewards[-1],
                    metrics={ENDING_METRICS[MAX_TOKENS]: 1.0, f"stop/{MAX_TOKENS}": 1.0},
                )
            # Pi ended before asking the model anything: no action to train on, and no
            # episode of the model's to score.
            raise InfrastructureFailure(f"Pi ended before its first model call: {event.error or 'no error recorded'}")
        return event.observation, self.stop_condition

    async def step(self, action: Any, *, extra: Any = None) -> StepResult:
        pending, self._pending = self._pending, None
        assert pending is not None, "step() follows an observation"
        tokens = [int(t) for t in action]
        self.calls[-1].sampled_tokens = tokens
        # The cookbook's ActionExtra is a dict (`stop_reason`: "length" when the sampler
        # cut the turn at limits.max_generation_tokens).
        stop_reason = extra.get("stop_reason") if isinstance(extra, dict) else getattr(extra, "stop_reason", None)
        if stop_reason:
            self.calls[-1].stop_reason = str(stop_reason)
        message, _ = self.renderer.parse_response(tokens)
        verdict = None if stop_reason == "length" else self.scoring.judge(message)
        if stop_reason == "length":
            # A turn cut before its end: the episode ends there, ungraded.
            self.observations.answered(tokens, message)
            self.view.unsent(message, CUT)
            pending.answer.set_exception(LimitReached(self.scoring.end(MAX_TOKENS)))
        elif verdict is not None:
            self.observations.answered(tokens, message)
            if verdict.retry:
                # The reference environment's corrective message: piexp's answer, not
                # Pi's; Pi still waits for the model's turn and never sees this one.
                self._extra += retry_messages(message, verdict.message)
                self.view.retry(message, verdict.message)
                observation = self.observations.observe(pending.body, self._extra)
                self.calls.append(SampledCall(observation.to_ints(), [], None, "stop"))
                self._pending = pending
                return StepResult(
                    reward=verdict.reward,
                    episode_done=False,
                    next_observation=observation,
                    next_stop_condition=self.stop_condition,
                    metrics={PARSE_ERROR: 1.0},
                )
            self.view.unsent(message, UNPARSED)
            pending.answer.set_exception(LimitReached(PARSE_ERROR))
        else:
            self._extra = []
            answer = answer_message(self.renderer, tokens, len(self.calls))
            message = assistant_message(answer)
            self.observations.answered(tokens, message)
            self.view.answer(message)
            pending.answer.set_result(answer)
        event = await self._next()
        if isinstance(event, _Request):
            return StepResult(
                reward=0.0,
                episode_done=False,
                next_observation=event.observation,
                next_stop_condition=self.stop_condition,
            )
        return self._final_step(event)

    async def _respond(self, body: dict[str, Any]) -> dict[str, Any]:
        """The endpoint's responder: each request becomes the loop's next observation."""
        assert self._events is not None
        observation = self.observations.observe(body)
        self.view.request(body)
        ending = self.scoring.overflow(observation.length, self.settings.limits, first=not self.calls)
        if ending is not None:
            raise LimitReached(ending)
        self.calls.append(SampledCall(observation.to_ints(), [], None, "stop"))
        request = _Request(body, observation)
        await self._events.put(request)
        return await request.answer

    async def _play(self) -> None:
        assert self._events is not None
        try:
            record = await self.harness.play_responder(
                self._respond, TRAIN_POLICY, self.task, self.language, self.settings
            )
        except BaseException as error:  # noqa: BLE001 - handed to the loop's step
            await self._events.put(error)
            if not isinstance(error, Exception):
                raise
            return
        await self._events.put(record)

    async def _next(self) -> _Request | EpisodeRecord:
        assert self._events is not None
        try:
            event = await self._events.get()
        except asyncio.CancelledError:
            # The loop left the episode (its rollout timeout): Pi is stopped now, not
            # left waiting for an answer until its wall-time limit.
            await asyncio.shield(self.close())
            raise
        if isinstance(event, BaseException):
            raise event
        if isinstance(event, _Request):
            self._pending = event
        return event

    def _final_step(self, record: EpisodeRecord) -> StepResult:
        """The last step: the episode's reward from Pi's trace, or piexp's failure raised."""
        self.scoring.settle(record)
        self._attach_tokens(record)
        self.played = record
        settings = self.settings
        if record.infrastructure_failure or record.error is not None:
            if self.evaluation or settings.infrastructure_errors != "penalize":
                raise InfrastructureFailure(record.error or "Pi's episode failed")
            reward = settings.reward.weights.infrastructure_error
            metrics = {name: 0.0 for name in REWARD_METRICS} | {"infrastructure_error": 1.0}
        elif self.scoring.stop is not None:
            # Ended by the scoring rule (a parse error, a cut turn, a prompt past the
            # limit): its terminal reward, no grade (a retried turn's penalty was its own
            # step's reward).
            reward = self.scoring.rewards[-1]
            metrics = dict(record.metrics) | {ENDING_METRICS[self.scoring.stop]: 1.0}
        else:
            binary = self.evaluation or settings.reward.mode == "binary"
            reward = record.reward if binary else record.shaped
            metrics = dict(record.metrics)
        metrics[PASSED_METRIC] = float(metrics.get("functional_correct", 0.0) == 1.0)
        metrics["sequence_splits"] = float(sequence_splits(self.calls))
        metrics["turns"] = float(record.turns)
        metrics["tool_calls"] = float(record.tool_calls)
        return StepResult(
            reward=reward,
            episode_done=True,
            next_observation=tinker.ModelInput.empty(),
            next_stop_condition=self.stop_condition,
            metrics=metrics,
            logs={"stop_reason": str(record.stop_reason), "harness": "pi"},
        )

    def _attach_tokens(self, record: EpisodeRecord) -> None:
        """The calls' tokens and the model's side of the conversation in the transcript,
        as an eval's model episodes have them."""
        if record.transcript is not None:
            self.view.show(record.transcript, self.calls, record.reward)

    async def close(self) -> None:
        """Stop the episode if the loop left it before Pi ended (a rollout timeout)."""
        episode, self._episode = self._episode, None
        if episode is not None and not episode.done():
            if self._pending is not None and not self._pending.answer.done():
                self._pending.answer.set_exception(LimitReached("rollout_timeout"))
            episode.cancel()
            try:
                await episode
            except BaseException:  # noqa: BLE001 - the episode is being abandoned
                pass


async def scripted_trajectory(
    harness: PlaysThroughEndpoint,
    policy: ScriptedPolicy,
    task: Task,
    language: str,
    settings: EpisodeSettings,
    renderer: renderers.Renderer,
) -> tuple[Trajectory, float]:
    """A scripted policy's episode through Pi as a trajectory the model could have sampled
    (imitation data: the warm start's, when a run trains in Pi): each of Pi's requests
    rendered as `PiEpisodeEnv` renders it, each answer as the tokens a model emits for it
    (`render_assistant_tokens`). Returns it with its shaped reward; piexp's own failure
    raises `InfrastructureFailure`."""
    # On an imported Harbor task the policy plays its oracle (or a no-op), not piexp's prompt.
    responder: Any = (
        VerifiedTaskResponder(policy.name, task.verifier) if task.verifier is not None else ScriptedResponder(policy)
    )
    stops = renderer.get_stop_sequences()
    transitions: list[Transition] = []
    observations = Observations(renderer)

    async def respond(body: dict[str, Any]) -> dict[str, Any]:
        observation = observations.observe(body)
        answer = await responder(body)
        tokens = render_assistant_tokens(renderer, assistant_message(answer), stops)
        observations.answered(tokens, assistant_message(answer))
        transitions.append(
            Transition(
                ob=observation,
                ac=TokensWithLogprobs(tokens=tokens, maybe_logprobs=[0.0] * len(tokens)),
                reward=0.0,
                episode_done=False,
            )  # fmt: skip
        )
        return answer

    record = await harness.play_responder(respond, policy.name, task, language, settings, record_transcript=False)
    if record.infrastructure_failure or record.error is not None or not transitions:
        raise InfrastructureFailure(record.error or "Pi made no model call")
    transitions[-1].reward = record.shaped
    transitions[-1].episode_done = True
    return Trajectory(transitions=transitions, final_ob=tinker.ModelInput.empty()), record.shaped


async def endpoint_trajectories(
    harness: PlaysThroughEndpoint,
    config: RunConfig,
    sandbox_url: str,
    tasks: Sequence[Task],
    policies: Sequence[str],
    progress: Any = None,
) -> tuple[list[Trajectory], list[float]]:
    """Scripted episodes played in a harness whose episodes ask an endpoint (on each task
    the policy named at the same index, cycling through the run's train languages): the
    model imitates the policies in the prompt, tools and results it acts in, not the
    reference environment's. Trajectories and their shaped rewards."""
    from piexp.env.dataset import episode_settings
    from piexp.env.episode import get_run_renderer
    from piexp.env.splits import build_splits
    from piexp.policies import make_policy

    settings = episode_settings(config, sandbox_url)
    renderer = get_run_renderer(settings.resolved_renderer_name(), settings.model_name)
    splits = build_splits(config)
    known = [*splits.train, *splits.eval, *tasks]
    made = {name: make_policy(name, renderer, known) for name in sorted(set(policies))}
    languages = config.train_languages
    gate = asyncio.Semaphore(CONCURRENT_EPISODES)

    async def one(index: int, task: Task) -> tuple[Trajectory, float]:
        policy = made[policies[index]]
        assert isinstance(policy, ScriptedPolicy)
        async with gate:
            played = await scripted_trajectory(
                harness, policy, task, languages[index % len(languages)], settings, renderer
            )
        if progress is not None:
            progress.advance()
        return played

    played = await asyncio.gather(*(one(index, task) for index, task in enumerate(tasks)))
    return [trajectory for trajectory, _ in played], [reward for _, reward in played]
