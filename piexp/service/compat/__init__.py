"""Every workaround piexp needs to train through SkyRL's Tinker-compatible server, by
where it lives, each item numbered in its own file:

* ``skyrl_server/`` runs in the server venv (no piexp there): ``launching.py`` starts the
  API server and engine (1 no torch on CPU, 2 no ``uv run``, 3 no orphans); ``fixes.py``
  makes skyrl train and score as Tinker does (1 losses summed over tokens, 2 prompt
  log-probs one per prompt token); ``speedups.py`` holds the CPU speed-ups, each its own
  flag (1 needed log-probs only, 2 LoRA as matmuls, 3 causal attention in blocks, 4
  untrained LoRA skipped, 5 sampling draws, 6 power-of-two sample batches). Its
  ``ENGINE_PATCHES`` is the one order the engine applies them in.
* ``proxy.py`` runs in piexp's process, in front of the server (1 ``sample_sequence_ids``,
  2 create-via-load, 3 seeds).
* ``launcher.py`` writes ``skyrl_server/`` out for the server venv and runs scripts there
  (:func:`run_server_script`).
* ``pins.py`` lists every tinker SDK and SkyRL name those items patch or call, with the
  parameters they rely on and a hash of each upstream function they copy; ``versions.py``
  the releases. :func:`check_service_pins` refuses a run, before it starts, whose
  installed packages moved one (as ``piexp/cookbook_compat.py`` does for tinker-cookbook,
  through the same :mod:`piexp.pinned_hooks`), so an upgrade is a deliberate act and never
  a silent mis-training.
"""

from __future__ import annotations

from piexp.service.compat.launcher import (
    ServerScriptError,
    launcher_files,
    launcher_preamble,
    run_server_script,
    write_launcher,
)
from piexp.service.compat.pins import SKYRL, TINKER_SDK, ThirdPartyMismatchError, check_service_pins
from piexp.service.compat.proxy import SampleIdProxy, add_sample_sequence_ids
from piexp.service.compat.versions import SKYRL_VERSION, TINKER_SDK_VERSION

__all__ = [
    "SKYRL",
    "SKYRL_VERSION",
    "TINKER_SDK",
    "TINKER_SDK_VERSION",
    "SampleIdProxy",
    "ServerScriptError",
    "ThirdPartyMismatchError",
    "add_sample_sequence_ids",
    "check_service_pins",
    "launcher_files",
    "launcher_preamble",
    "run_server_script",
    "write_launcher",
]
