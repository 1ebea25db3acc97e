"""The record of what tinker-cookbook was asked to run: a train run writes its composed
`rl.train.Config` into its folder as readable JSON (`rl_train_config.json`, nested
cookbook objects as `{"type": ..., field: value}`), and `reproduce` rebuilds the Config
from the recomposed run config and compares the two, so a change in piexp's mapping or
in the cookbook's defaults is caught before a rerun, not discovered in its results."""

from __future__ import annotations

from piexp.run_folder import RunFolder

import dataclasses
import json
from pathlib import Path
from typing import Any

import chz

RECORD_NAME = RunFolder.RL_RECORD
# Values that depend on the machine or the moment rather than on the config (folder,
# resolved service URL and model folder, warm-start checkpoint); their
# sources are in .hydra/config.yaml, which reproduce checks on its own.
RUN_LOCAL_FIELDS = frozenset(
    {
        "log_path",
        "base_url",
        "load_checkpoint_path",
        "wandb_name",
        "model_name",
        "kl_reference_config.base_model",
    }
)


def describe(value: Any) -> Any:
    """`value` as JSON data: cookbook (chz) objects and dataclasses become dicts that
    name their type. Of the dataset builder only the rollout policy its episodes get is
    shown (the rest is the run config, already in .hydra/config.yaml)."""
    if chz.is_chz(value):
        described: dict[str, Any] = {"type": f"{type(value).__module__}.{type(value).__qualname__}"}
        if hasattr(value, "episode_rollout_config"):
            described["episode_rollout_config"] = describe(value.episode_rollout_config())
            return described
        for name in chz.chz_fields(value):
            described[name] = describe(getattr(value, name))
        return described
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        described = {"type": f"{type(value).__module__}.{type(value).__qualname__}"}
        described.update({field.name: describe(getattr(value, field.name)) for field in dataclasses.fields(value)})
        return described
    if isinstance(value, (list, tuple)):
        return [describe(item) for item in value]
    if isinstance(value, dict):
        return {str(key): describe(item) for key, item in value.items()}
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return repr(value)


def write_rl_record(run_dir: Path, train_config: Any) -> Path:
    path = run_dir / RECORD_NAME
    path.write_text(json.dumps(describe(train_config), indent=2) + "\n", encoding="utf-8")
    return path
