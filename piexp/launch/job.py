"""The Hydra job: validate the composed config, then run the selected mode in the
Hydra run folder. Failures a user can cause end the job with one paragraph."""

from __future__ import annotations

import sys
from pathlib import Path

import hydra
from omegaconf import DictConfig

from piexp.config.paths import config_dir
from piexp.config.presets import register_presets
from piexp.errors import UserError


def run_job(cfg: DictConfig) -> float | None:
    from hydra.core.hydra_config import HydraConfig

    from piexp.cli import report_user_error
    from piexp.config.compose import validate
    from piexp.launch.run import run_mode

    run_dir = Path(HydraConfig.get().runtime.output_dir)
    try:
        config = validate(cfg)
        return run_mode(config, run_dir)
    except UserError as error:
        report_user_error(error)
        sys.exit(error.exit_code)


def hydra_entry() -> None:
    register_presets()
    main = hydra.main(config_path=str(config_dir()), config_name="config", version_base="1.3")(run_job)
    main()
