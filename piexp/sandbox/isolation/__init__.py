"""How a run is contained, one concern per module, whichever launcher starts it: the
read-only root layout and environment (layout.py), per-run cgroups (cgroups.py, one
implementation per version: cgroups_v1.py, cgroups_v2.py), rlimits (rlimits.py), and the
kernel's process controls: death with the server, reaping, killing a sandbox
(process.py). The syscall filter (syscall_filter.py) and the run user and area
(run_area.py) sit beside this package; the launchers (launchers/) apply all of these
before a run's program starts."""

from typing import Optional

from .cgroups import Cgroups, mountinfo, own_cgroups
from .cgroups_v1 import CgroupsV1
from .cgroups_v2 import CgroupsV2


def detect_cgroups() -> Optional[Cgroups]:
    """The cgroups this server can create runs' cgroups in: v2 where its own cgroup is
    writable with memory and pids delegated, else v1 memory and/or pids; None if neither."""
    mounts, own = mountinfo(), own_cgroups()
    return CgroupsV2.detect(mounts, own) or CgroupsV1.detect(mounts, own)
