"""Experiment presets: `experiments/NAME.yaml`, selectable as `experiment=NAME`.

Hydra looks for group options in a folder named after the group; the presets live in
the top-level `experiments/` folder instead (the layout shows what they are), so they
are registered in Hydra's ConfigStore under the group `experiment`, at the global
package, with their own defaults lists intact.
"""

from __future__ import annotations

import yaml
from hydra.core.config_store import ConfigStore

from piexp.config.paths import experiments_dir

_registered = False


def preset_names() -> list[str]:
    return sorted(path.stem for path in experiments_dir().glob("*.yaml"))


def register_presets() -> None:
    global _registered
    if _registered:
        return
    store = ConfigStore.instance()
    for path in sorted(experiments_dir().glob("*.yaml")):
        node = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
        store.store(group="experiment", name=path.stem, node=node, package="_global_")
    _registered = True
