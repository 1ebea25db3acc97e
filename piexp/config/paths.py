"""Where the Hydra config tree and the experiment presets live.

In a source checkout they are the top-level `conf/` and `experiments/` folders; an
installed piexp carries the same files as the packages `piexp._conf` and
`piexp._experiments` (see pyproject.toml), so reruns work without the source tree.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

_SOURCE_ROOT = Path(__file__).resolve().parents[2]


def _packaged(name: str) -> Path | None:
    try:
        path = Path(str(resources.files(name)))
    except ModuleNotFoundError:
        return None
    return path if path.is_dir() else None


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
