"""Where the Hydra config tree and the experiment presets live.

In a source checkout they are the top-level `conf/` and `experiments/` folders; an
installed piexp carries the same files as the packages `piexp._conf` and
`piexp._experiments` (see pyproject.toml), so reruns work without the source tree.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

_SOURCE_ROOT = Path(__file__).resolve().parents[2]


def _packaged(name: str) -> Path | None:
    # piexp._conf has no __init__.py (it is the plain conf/ folder), so it installs as a
    # namespace package, for which importlib.resources returns a MultiplexedPath whose
    # str() is not a path; the import spec's search locations are plain folders.
    try:
        spec = importlib.util.find_spec(name)
    except ModuleNotFoundError:
        return None
    for location in (spec.submodule_search_locations or []) if spec is not None else []:
        path = Path(location)
        if path.is_dir():
            return path
    return None


def config_dir() -> Path:
    source = _SOURCE_ROOT / "conf"
    if (source / "config.yaml").is_file():
        return source
    packaged = _packaged("piexp._conf")
    if packaged is None:
        raise FileNotFoundError("piexp's config tree (conf/) is missing from this installation")
    return packaged


def experiments_dir() -> Path:
    source = _SOURCE_ROOT / "experiments"
    if (_SOURCE_ROOT / "conf" / "config.yaml").is_file() and source.is_dir():
        return source
    packaged = _packaged("piexp._experiments")
    if packaged is None:
        raise FileNotFoundError("piexp's experiment presets (experiments/) are missing")
    return packaged
