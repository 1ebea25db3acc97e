"""The run config's `rollouts` block: where a run's episodes are played. `local` plays
them in this process (against the run's own sandbox); `ray` sends each training group
(and each eval or check episode) to a node of a Ray cluster, which plays it against its
own sandbox while the model calls go to the run's sampler (piexp.launch.ray_rollouts).
A tagged union of one settings class per variant (part of
`piexp.config.schema.RunConfig`)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, PositiveFloat, PositiveInt, field_validator

from piexp.config.base import VariantSettings

__all__ = ["LocalRollouts", "RayRollouts", "RolloutSettings", "RolloutsBase"]


class RolloutsBase(VariantSettings):
    GROUP = "rollouts"
    TAG = "kind"

    kind: str = Field(description="where episodes are played")


class LocalRollouts(RolloutsBase):
    """Every episode in this process, against the run's sandbox."""

    kind: Literal["local"] = Field(description="where episodes are played: in this process")


class RayRollouts(RolloutsBase):
    """Each group on a node of a Ray cluster (the `ray` extra), each node with its own
    sandbox; the driver keeps the first complete result of each group."""

    kind: Literal["ray"] = Field(description="where episodes are played: on a Ray cluster's nodes")
    address: str | None = Field(
        description="the cluster: null = start one on this machine for the run (stopped at exit); "
        "auto, HOST:PORT or ray://HOST:PORT = join a running one"
    )
    local_cpus: PositiveInt | None = Field(
        description="CPUs of the cluster started when address is null (null = this machine's cores)"
    )
    cpus_per_group: PositiveFloat = Field(description="CPUs a group (an eval or check episode) reserves on its node")
    memory_mb_per_group: PositiveInt | None = Field(
        description="memory a group reserves on its node, in MB (null = none reserved)"
    )
    node_resource: str | None = Field(
        description="a custom resource only nodes with piexp and its sandbox have (ray start "
        "--resources='{\"NAME\": 1}'); groups go only there (null = any node)"
    )
    spread: bool = Field(description="spread groups across nodes (Ray's SPREAD strategy) instead of packing them")
    group_retries: Annotated[int, Field(ge=0)] = Field(
        description="a group lost with its node (or its worker) is played again up to this many times; "
        "past that it is handled as algo.infrastructure_errors says (retry: the run stops, resumable; "
        "mask or penalize: the group is dropped, never scored)"
    )
    max_groups_in_flight: PositiveInt = Field(description="groups sent to the cluster and not yet back, at most")
    connect_timeout_s: PositiveFloat = Field(description="seconds to reach the cluster (or start the local one)")
    node_check_timeout_s: PositiveFloat = Field(
        description="seconds each node has to answer the check made before any episode (a node starts a "
        "worker for it, slow on a busy machine)"
    )

    @field_validator("address")
    @classmethod
    def _an_address(cls, address: str | None) -> str | None:
        if address is None or address == "auto":
            return address
        host_port = address.removeprefix("ray://")
        host, _, port = host_port.rpartition(":")
        if not host or not port.isdigit():
            raise ValueError(f"must be null, auto, HOST:PORT or ray://HOST:PORT, got {address!r}")
        return address


RolloutSettings = Annotated[LocalRollouts | RayRollouts, Field(discriminator="kind")]
