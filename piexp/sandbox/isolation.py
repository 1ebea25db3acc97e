"""How one run is isolated: the sandbox's root layout, the bubblewrap command line,
resource limits, cgroups, and killing the whole process tree.

Two launchers give a run the same isolation: by default the zygote (zygote.py/zygote.c:
one long-lived process builds the root below once and starts each run in fresh
namespaces inside it), else, or as its fallback, one bwrap per run as described here.

Choices and why:
- bubblewrap with every namespace unshared: no network (only an unconfigured loopback
  exists), a private pid namespace (so `/proc` shows only the run's processes and killing
  the namespace's init kills detached/`setsid` children too), a private mount namespace in
  which the system is read-only and only the run directory and a size-capped tmpfs `/tmp`
  are writable. `--clearenv` plus spawning bwrap itself with a minimal environment: the
  environment of bwrap's own process is what `/proc/1/environ` shows inside the sandbox,
  so the host environment (TINKER_API_KEY, ...) must never reach bwrap at all.
- The program runs as uid/gid 65534 (nobody) inside a user namespace, in a new session
  (no terminal injection), and dies with its parent (`--die-with-parent`). Outside, that
  is the run user (run_area.RunUser): a server running as root starts bwrap as an
  unprivileged host uid, so no id inside maps to host root. Run directories live in
  the server's private run area (run_area.py); a syscall filter (syscall_filter.py) is
  installed just before the program's exec.
- Only the runtime directories are bound from outside /usr (e.g. a pyenv prefix under
  /root): the rest of /root, /work, /home and the host's /tmp are simply absent.
- Memory: RLIMIT_AS breaks node (V8 reserves huge virtual ranges), so memory is limited by
  a cgroup when one is writable (v2, else v1 `memory`), and otherwise per runtime:
  python gets RLIMIT_AS, node `--max-old-space-size` plus RLIMIT_DATA (which counts only
  writable private memory actually mapped), julia RLIMIT_DATA. Under a memory cgroup node
  gets no V8 flag at all: any V8 flag changes V8's flag hash, so node rejects its built-in
  code cache and compiles its own modules at every start (~6 ms a run inside bwrap, a
  fifth of a small program's run; bench/sandbox.py). The cgroup's OOM kill is reported
  in the run's stderr instead of V8's "heap out of memory" (`CgroupLimiter.oom_kills`).
- Processes: a cgroup `pids.max` when writable, else RLIMIT_NPROC (counted per uid and
  user namespace, so shared by the runs of one zygote); the pid namespace and the
  wall-time kill still bound a fork bomb in time.
- How limits are applied without a `preexec_fn` (which makes CPython fork the whole
  server and run Python in the child, ~4-5 ms a run, instead of vfork+exec): bwrap is
  started with `--info-fd` (it reports the sandbox init's pid) and `--block-fd` (the
  init waits, fully set up, before it forks the program). The runner then sets the
  rlimits on that pid with prlimit(2) and moves it into the run's cgroups, and releases
  it; the program and all its descendants inherit both. (Under cgroup v1 the cgroups
  are joined earlier and cheaper, by the thread that starts bwrap: spawn.py.) bwrap's `--die-with-parent`
  binds the outer bwrap to the server (PR_SET_PDEATHSIG), as the preexec did. The
  program's file is written only after the init is confined: if the server dies before
  the release, the init reads EOF on the block fd and its runtime finds no program.
  Side effect where the init joins its cgroups at the block fd (cgroup v2): the
  sandbox's cgroup namespace is rooted at the server's cgroup rather than the run's,
  so `/proc/self/cgroup` inside shows `/piexp-sandbox-<pid>/run-<n>` instead of `/`.
"""

from __future__ import annotations

import asyncio
import ctypes
import errno
import functools
import logging
import os
import resource
import shutil
import signal
import subprocess
import threading
import time
from dataclasses import dataclass
from typing import Callable, Iterable, Optional, Sequence

log = logging.getLogger(__name__)

SANDBOX_UID = 65534
SANDBOX_GID = 65534
SANDBOX_WORKDIR = "/sandbox"
SANDBOX_PATH = "/usr/local/bin:/usr/bin:/bin"
# A run's whole environment: nothing of the host's.
SANDBOX_ENV = {"PATH": SANDBOX_PATH, "HOME": "/tmp", "LANG": "C.UTF-8", "PYTHONDONTWRITEBYTECODE": "1"}

# /etc entries a dynamically linked runtime needs; nothing else of /etc is exposed. Files
# are copied into the sandbox's (read-only) root with --file, a symlink is recreated, and
# only the alternatives directory is bind-mounted: every bind costs bwrap a mount, a
# remount and a read of /proc/self/mountinfo (~0.12 ms each; six binds were ~0.7 ms a
# run). ld.so.conf(.d) are left out: only ldconfig reads them, the loader reads the cache.
_ETC_COPIED_FILES = ("/etc/ld.so.cache", "/etc/nsswitch.conf", "/etc/localtime")
_ETC_BOUND_DIRS = ("/etc/alternatives",)


@functools.lru_cache(maxsize=1)
def _etc_copies_split() -> tuple[tuple[tuple[str, str], ...], tuple[str, ...]]:
    """(symlinks as (target, path), regular files) among _ETC_COPIED_FILES that exist:
    a symlink (/etc/localtime usually is one) is recreated, a file is copied."""
    links, files = [], []
    for path in _ETC_COPIED_FILES:
        if os.path.islink(path):
            links.append((os.readlink(path), path))
        elif os.path.isfile(path):
            files.append(path)
    return tuple(links), tuple(files)

PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36


def set_parent_death_signal(sig: int = signal.SIGKILL) -> None:
    """Ask the kernel to send `sig` to this process when its parent dies (Linux only), so
    a server started by piexp can never be left orphaned."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, int(sig), 0, 0, 0)
    except (OSError, AttributeError):  # pragma: no cover - non-Linux
        pass


def set_child_subreaper() -> None:
    """Make orphaned descendants (a sandbox's init, once the outer bwrap has exited) be
    reparented to this process rather than the host's init, so the runner can reap them
    as soon as they exit (Linux only)."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    except (OSError, AttributeError):  # pragma: no cover - non-Linux
        pass


@dataclass(frozen=True)
class Runtime:
    """A runtime resolved on the host: the absolute binary to exec and the directory to
    bind read-only into the sandbox (None when it already lives under /usr)."""

    binary: str
    bind_prefix: Optional[str]
    # Where the prefix is bound from: itself, or a read-only view of it that the run
    # user can reach (run_area.RunArea.view_of); None means bind_prefix.
    bind_source: Optional[str] = None


def _under_usr(path: str) -> bool:
    return path == "/usr" or path.startswith("/usr/")


def resolve_runtime(binary: str) -> Optional[Runtime]:
    """Find `binary` on PATH and resolve it to a real executable and its install prefix.

    For python the interpreter is asked for its base prefix, which sees through pyenv
    shims and virtual environments: the sandbox gets the bare base interpreter, never
    the venv (and its site-packages) piexp itself runs in.
    """
    found = shutil.which(binary)
    if found is None:
        return None
    if binary.startswith("python"):
        try:
            out = subprocess.run(
                [found, "-I", "-S", "-c", "import sys,os;print(sys.base_prefix);print(os.path.realpath(sys.executable))"],
                capture_output=True, text=True, timeout=20, check=True,
            ).stdout.splitlines()
            base_prefix, executable = out[0], out[1]
        except (subprocess.SubprocessError, OSError, IndexError):
            return None
        exe = executable
        if not exe.startswith(base_prefix.rstrip("/") + "/"):
            # A venv interpreter: use the base installation's python3 instead.
            for name in ("python3", os.path.basename(executable)):
                cand = os.path.join(base_prefix, "bin", name)
                if os.access(cand, os.X_OK):
                    exe = os.path.realpath(cand)
                    break
        prefix = os.path.realpath(base_prefix)
    else:
        exe = os.path.realpath(found)
        prefix = os.path.dirname(os.path.dirname(exe))
    return Runtime(binary=exe, bind_prefix=None if _under_usr(prefix) or _under_usr(exe) else prefix)


def bwrap_path() -> Optional[str]:
    return shutil.which("bwrap")


def root_layout(runtimes: Iterable[Runtime]) -> tuple[tuple[str, str, str], ...]:
    """The sandbox's read-only root as (kind, a, b) rows, for both launchers: "B" binds
    host path a read-only at b, "S" makes b a symlink to a, "F" puts a read-only copy of
    host file a at b. The system dirs, the /etc entries above, and each runtime's
    install prefix when it lives outside /usr."""
    rows: list[tuple[str, str, str]] = [("B", "/usr", "/usr")]
    for name in ("bin", "lib", "lib32", "lib64", "sbin"):
        target = os.path.join("/", name)
        if os.path.islink(target):
            rows.append(("S", os.readlink(target), target))
        elif os.path.isdir(target):
            rows.append(("B", target, target))
    rows += [("B", entry, entry) for entry in _ETC_BOUND_DIRS if os.path.isdir(entry)]
    links, files = _etc_copies_split()
    rows += [("S", target, path) for target, path in links]
    rows += [("F", path, path) for path in files]
    prefixes: dict[str, str] = {}
    for runtime in runtimes:
        if runtime.bind_prefix and runtime.bind_prefix not in prefixes:
            prefixes[runtime.bind_prefix] = runtime.bind_source or runtime.bind_prefix
    rows += [("B", source, prefix) for prefix, source in prefixes.items()]
    return tuple(rows)


_BWRAP_LAYOUT_FLAGS = {"B": "--ro-bind", "S": "--symlink"}


@functools.lru_cache(maxsize=16)
def _bwrap_system_args(runtime: Runtime) -> tuple[str, ...]:
    """`root_layout` as bwrap options, computed once per runtime (the host layout does
    not change while the server runs). File copies ("F") go by fd: `open_etc_copies`."""
    return tuple(
        arg for kind, a, b in root_layout((runtime,)) if kind in _BWRAP_LAYOUT_FLAGS
        for arg in (_BWRAP_LAYOUT_FLAGS[kind], a, b)
    )


def build_bwrap_argv(
    bwrap: str,
    run_dir: str,
    command: list[str],
    runtime: Runtime,
    tmpfs_size_mb: int,
    *,
    tmp_dir: Optional[str] = None,
    info_fd: Optional[int] = None,
    block_fd: Optional[int] = None,
    seccomp_fd: Optional[int] = None,
    etc_copies: Sequence[tuple[int, str]] = (),
) -> list[str]:
    """The bubblewrap command line for one run (see the module docstring for why).

    `tmp_dir`: a host directory (the run area's capped tmpfs) bound at /tmp; without
    it /tmp is a tmpfs of `tmpfs_size_mb` (bwrap cannot cap its inodes).
    `info_fd`/`block_fd`: bwrap writes the sandbox init's pid to `info_fd` and, once the
    sandbox is set up, waits for a byte on `block_fd` before it starts the program; the
    runner applies rlimits and cgroups in between (`confine_blocked_child`).
    `seccomp_fd`: the syscall filter (classic BPF) bwrap installs just before the exec."""
    argv = [
        bwrap,
        "--unshare-all",
        "--unshare-user",  # explicit: --unshare-all only *tries*, and --disable-userns needs it
        "--die-with-parent",
        "--new-session",
        "--clearenv",
        *[arg for name, value in SANDBOX_ENV.items() for arg in ("--setenv", name, value)],
        *_bwrap_system_args(runtime),
        *[arg for fd, path in etc_copies for arg in ("--perms", "0444", "--file", str(fd), path)],
        # bwrap's --proc covers /proc/sys, sysrq-trigger, irq and bus read-only.
        "--proc", "/proc",
        "--dev", "/dev",
        *(("--bind", tmp_dir, "/tmp") if tmp_dir else ("--size", str(tmpfs_size_mb << 20), "--tmpfs", "/tmp")),
        "--bind", run_dir, SANDBOX_WORKDIR,
        # bwrap's root is a tmpfs holding the mount points (/etc, /sandbox, ...): make it
        # read-only too, so /, /etc etc. are not scratch space; /tmp and the run dir are
        # separate mounts and stay writable.
        "--remount-ro", "/",
        "--chdir", SANDBOX_WORKDIR,
        "--uid", str(SANDBOX_UID),
        "--gid", str(SANDBOX_GID),
        "--disable-userns",
    ]
    if info_fd is not None:
        argv += ["--info-fd", str(info_fd)]
    if block_fd is not None:
        argv += ["--block-fd", str(block_fd)]
    if seccomp_fd is not None:
        argv += ["--seccomp", str(seccomp_fd)]
    argv += ["--", *command]
    return argv


def open_etc_copies() -> list[tuple[int, str]]:
    """(fd, path) of each /etc file a run gets a copy of (see _ETC_COPIED_FILES), opened
    for one bwrap start: bwrap reads each fd to its end. The caller closes them."""
    opened = []
    for path in _etc_copies_split()[1]:  # the symlinks among them: root_layout
        try:
            opened.append((os.open(path, os.O_RDONLY | os.O_CLOEXEC), path))
        except OSError:
            continue
    return opened


def launcher_env() -> dict[str, str]:
    """The environment a launcher (bwrap, the zygote) is started with: nothing from the
    host. What a run's /proc/1/environ would show (the zygote's is not even readable)."""
    return {"PATH": SANDBOX_PATH, "LANG": "C.UTF-8"}


# --------------------------------------------------------------------------- cgroups


def _mountinfo() -> list[tuple[str, str, str, str]]:
    """(root, mountpoint, fstype, super options) of every mount."""
    rows = []
    try:
        with open("/proc/self/mountinfo") as f:
            for line in f:
                left, _, right = line.partition(" - ")
                lparts, rparts = left.split(), right.split()
                if len(lparts) >= 5 and len(rparts) >= 3:
                    rows.append((lparts[3], lparts[4], rparts[0], rparts[2]))
    except OSError:
        pass
    return rows


def _own_cgroups() -> dict[str, str]:
    """controller (or '' for v2) -> this process's cgroup path."""
    out: dict[str, str] = {}
    try:
        with open("/proc/self/cgroup") as f:
            for line in f:
                _, controllers, path = line.rstrip("\n").split(":", 2)
                for c in controllers.split(",") if controllers else [""]:
                    out[c] = path
    except OSError:
        pass
    return out


def write_control_file(path: str, value: str) -> None:
    """One write to a cgroup (or /proc) control file, unbuffered: these writes happen
    several times a run, and a text-mode file object costs more than the write itself."""
    fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC)
    try:
        os.write(fd, value.encode())
    finally:
        os.close(fd)


class CgroupLimiter:
    """Per-run memory and pids cgroups, when the host lets us create them.

    Each run gets its own child cgroup(s) under a per-server parent that sits inside the
    server's own cgroup (so container limits still apply above it). bwrap starts inside
    them (v1: spawn.py's thread joins first), or its held init is moved there before the
    program starts (`confine_blocked_child`), so every descendant is counted.
    """

    def __init__(self, kind: str, parents: dict[str, str], cpu_share_dir: Optional[str] = None,
                 home_tasks: Optional[list[str]] = None):
        self.kind = kind  # "v2" or "v1"
        self.parents = parents  # controller -> parent dir ("unified" for v2)
        # v1 only: the `tasks` files of this server's own cgroup in every hierarchy a run
        # joins, where the spawner thread returns after starting a sandbox (spawn.py);
        # None when they could not be verified.
        self.home_tasks = home_tasks
        # v1 only: one cpu cgroup that every run of this server joins. Each session is
        # its own scheduling autogroup, so without it eight sandboxed programs got eight
        # CPU shares against the harness's one, and the harness (rendering, tools,
        # reward) waited for the CPU; together they now weigh as one (cpu.shares 1024,
        # as a nice-0 session). CFS is work-conserving: an idle harness costs the
        # programs nothing (bench/rollouts.py: harness share at concurrency 8, 11% -> 7%).
        self.cpu_share_dir = cpu_share_dir
        self._seq = 0

    @staticmethod
    def _reap_stale(base: str) -> None:
        """Remove parents left by servers that were SIGKILLed (e.g. by PR_SET_PDEATHSIG)
        and so never ran their cleanup; they are empty once their processes are gone."""
        try:
            names = os.listdir(base)
        except OSError:
            return
        for name in names:
            if not name.startswith("piexp-sandbox-"):
                continue
            pid = name.rsplit("-", 1)[-1]
            if not pid.isdigit() or os.path.exists(f"/proc/{pid}"):
                continue
            parent = os.path.join(base, name)
            try:
                for child in os.listdir(parent):
                    if child.startswith("run-"):
                        os.rmdir(os.path.join(parent, child))
                os.rmdir(parent)
            except OSError:
                pass

    @classmethod
    def detect(cls) -> Optional["CgroupLimiter"]:
        own = _own_cgroups()
        mounts = _mountinfo()
        tag = f"piexp-sandbox-{os.getpid()}"
        # cgroup v2: needs a writable own cgroup with memory and pids delegated.
        for root, mnt, fstype, _ in mounts:
            if fstype != "cgroup2" or "" not in own:
                continue
            rel = os.path.relpath(own[""], root) if own[""].startswith(root) else own[""].lstrip("/")
            base = os.path.normpath(os.path.join(mnt, rel))
            try:
                with open(os.path.join(base, "cgroup.controllers")) as f:
                    available = f.read().split()
                if not {"memory", "pids"} <= set(available):
                    continue
                cls._reap_stale(base)
                parent = os.path.join(base, tag)
                os.mkdir(parent)
                try:
                    write_control_file(os.path.join(parent, "cgroup.subtree_control"), "+memory +pids")
                except OSError:
                    os.rmdir(parent)
                    continue
                return cls("v2", {"unified": parent})
            except OSError:
                continue
        # cgroup v1: separate memory and pids hierarchies.
        parents: dict[str, str] = {}
        for controller in ("memory", "pids"):
            base = cls._v1_base(mounts, own, controller)
            if base is None:
                continue
            parent = os.path.join(base, tag)
            try:
                os.mkdir(parent)
                parents[controller] = parent
            except OSError:
                pass
        if parents:
            cpu_share_dir = cls._make_cpu_share_dir(mounts, own, tag)
            joined = [*parents.values(), *([cpu_share_dir] if cpu_share_dir else [])]
            return cls("v1", parents, cpu_share_dir, cls._verified_home_tasks(joined))
        return None

    @staticmethod
    def _verified_home_tasks(joined_parents: list[str]) -> Optional[list[str]]:
        """The `tasks` file of each joined parent's own parent (this server's cgroup),
        provided this thread is listed in it, so that returning there is exact."""
        me = str(threading.get_native_id())
        homes = []
        for parent in joined_parents:
            tasks = os.path.join(os.path.dirname(parent), "tasks")
            try:
                with open(tasks) as f:
                    if me not in f.read().split():
                        return None
            except OSError:
                return None
            homes.append(tasks)
        return homes

    @classmethod
    def _v1_base(cls, mounts, own: dict[str, str], controller: str) -> Optional[str]:
        """This server's own cgroup dir in the v1 hierarchy of `controller` (stale parents
        of dead servers reaped), or None when that controller is not mounted."""
        for root, mnt, fstype, opts in mounts:
            if fstype != "cgroup" or controller not in opts.split(","):
                continue
            path = own.get(controller, "/")
            rel = os.path.relpath(path, root) if path.startswith(root) else path.lstrip("/")
            base = os.path.normpath(os.path.join(mnt, rel))
            if not os.path.isdir(base):
                base = mnt
            cls._reap_stale(base)
            return base
        return None

    @classmethod
    def _make_cpu_share_dir(cls, mounts, own: dict[str, str], tag: str) -> Optional[str]:
        base = cls._v1_base(mounts, own, "cpu")
        if base is None:
            return None
        directory = os.path.join(base, tag)
        try:
            os.mkdir(directory)
            write_control_file(os.path.join(directory, "cpu.shares"), "1024")
            return directory
        except OSError:
            return None

    def joined_dirs(self, run_dirs: list[str]) -> list[str]:
        """The cgroups a run's processes join: its own, plus the server's shared cpu one."""
        return [*run_dirs, self.cpu_share_dir] if run_dirs and self.cpu_share_dir else list(run_dirs)

    def self_join_files(self, run_dirs: list[str]) -> list[str]:
        """The files a process (v1: a thread) writes "0" to in order to join the run's
        cgroups itself: v1 `tasks` (moves only the writer, no global rwsem), v2
        `cgroup.procs`."""
        name = "tasks" if self.kind == "v1" else "cgroup.procs"
        return [os.path.join(d, name) for d in self.joined_dirs(run_dirs)]

    def create(self, memory_bytes: int, max_pids: int) -> list[str]:
        """Create the run's cgroup dirs with limits; returns their paths."""
        self._seq += 1
        name = f"run-{self._seq}"
        dirs = []
        try:
            if self.kind == "v2":
                d = os.path.join(self.parents["unified"], name)
                os.mkdir(d)
                dirs.append(d)
                write_control_file(os.path.join(d, "memory.max"), str(memory_bytes))
                try:
                    write_control_file(os.path.join(d, "memory.swap.max"), "0")
                except OSError:
                    pass
                write_control_file(os.path.join(d, "pids.max"), str(max_pids))
            else:
                if "memory" in self.parents:
                    d = os.path.join(self.parents["memory"], name)
                    os.mkdir(d)
                    dirs.append(d)
                    write_control_file(os.path.join(d, "memory.limit_in_bytes"), str(memory_bytes))
                    try:
                        write_control_file(os.path.join(d, "memory.memsw.limit_in_bytes"), str(memory_bytes))
                    except OSError:
                        pass
                if "pids" in self.parents:
                    d = os.path.join(self.parents["pids"], name)
                    os.mkdir(d)
                    dirs.append(d)
                    write_control_file(os.path.join(d, "pids.max"), str(max_pids))
        except OSError:
            self.remove(dirs)
            raise
        return dirs

    def oom_kills(self, dirs: list[str]) -> int:
        """How many processes the kernel's OOM killer killed in a run's memory cgroup
        (v1 `memory.oom_control`, v2 `memory.events`; 0 where the counter is absent)."""
        for d in dirs:
            for name in ("memory.events", "memory.oom_control"):
                try:
                    with open(os.path.join(d, name)) as f:
                        for line in f:
                            key, _, value = line.partition(" ")
                            if key == "oom_kill":
                                return int(value)
                except (OSError, ValueError):
                    continue
        return 0

    @property
    def limits_memory(self) -> bool:
        return self.kind == "v2" or "memory" in self.parents

    @property
    def limits_pids(self) -> bool:
        return self.kind == "v2" or "pids" in self.parents

    def _try_remove(self, d: str) -> bool:
        """One attempt to remove a run's cgroup: True when it is gone; otherwise what is
        left in it is killed so that a later attempt can succeed."""
        try:
            os.rmdir(d)
            return True
        except OSError as exc:
            if exc.errno == errno.ENOENT:
                return True
            self._kill_members(d)
            return False

    def remove(self, dirs: list[str]) -> None:
        """Kill anything left in the run's cgroups and remove them."""
        for d in dirs:
            for _ in range(50):
                if self._try_remove(d):
                    break
                time.sleep(0.01)

    async def aremove(self, dirs: list[str]) -> None:
        """`remove` for the event loop: never blocks it while a cgroup drains."""
        for d in dirs:
            for attempt in range(200):
                if self._try_remove(d):
                    break
                await asyncio.sleep(0.001 * min(16, 1 << attempt))

    @staticmethod
    def _kill_members(d: str) -> None:
        try:
            with open(os.path.join(d, "cgroup.procs")) as f:
                for pid in f.read().split():
                    if pid == str(os.getpid()):
                        continue  # a server thread left here (spawn.py logs it): never kill ourselves
                    try:
                        os.kill(int(pid), signal.SIGKILL)
                    except (ProcessLookupError, ValueError):
                        pass
        except OSError:
            pass

    def close(self) -> None:
        for parent in [*self.parents.values(), *([self.cpu_share_dir] if self.cpu_share_dir else [])]:
            try:
                os.rmdir(parent)
            except OSError:
                pass


# --------------------------------------------------------------------------- limits


@dataclass(frozen=True)
class Limits:
    cpu_time_s: int
    file_size_bytes: int
    open_files: int
    processes: Optional[int]  # RLIMIT_NPROC; None where a pids cgroup bounds the run
    address_space_bytes: Optional[int] = None  # RLIMIT_AS (python without memory cgroup)
    data_bytes: Optional[int] = None  # RLIMIT_DATA (node/julia without memory cgroup)


def rlimit_pairs(limits: Limits) -> list[tuple[int, tuple[int, int]]]:
    """(resource, (soft, hard)) for every rlimit a run gets."""
    pairs = [
        (resource.RLIMIT_CORE, (0, 0)),
        (resource.RLIMIT_CPU, (limits.cpu_time_s, limits.cpu_time_s + 1)),
        (resource.RLIMIT_FSIZE, (limits.file_size_bytes, limits.file_size_bytes)),
        (resource.RLIMIT_NOFILE, (limits.open_files, limits.open_files)),
    ]
    if limits.processes is not None:
        pairs.append((resource.RLIMIT_NPROC, (limits.processes, limits.processes)))
    if limits.address_space_bytes is not None:
        pairs.append((resource.RLIMIT_AS, (limits.address_space_bytes, limits.address_space_bytes)))
    if limits.data_bytes is not None:
        pairs.append((resource.RLIMIT_DATA, (limits.data_bytes, limits.data_bytes)))
    return pairs


def confine_blocked_child(pid: int, limits: Limits, cgroup_dirs: list[str], *, rlimits: bool = True) -> None:
    """Apply the run's rlimits and cgroups to bwrap's sandbox init `pid` while it is held
    at `--block-fd` (set up, but before it forks the program): everything the program
    ever starts descends from it after this point, so nothing escapes the limits.

    This replaces a `preexec_fn`, which forces CPython to fork() the (large) server
    process and run Python code in the child instead of vfork()+exec (~4-5 ms a run)."""
    for d in cgroup_dirs:
        write_control_file(os.path.join(d, "cgroup.procs"), str(pid))
    for res, pair in rlimit_pairs(limits) if rlimits else ():
        resource.prlimit(pid, res, pair)


def make_preexec(limits: Limits, cgroup_dirs: list[str]) -> Callable[[], None]:
    """The function run in the child between fork and exec (only for unisolated runs,
    without bwrap): join the run's cgroups, set rlimits, and die if the server dies.
    It must only make async-signal-safe-ish syscalls: no locks, no logging."""

    pairs = rlimit_pairs(limits)

    def preexec() -> None:
        pid = str(os.getpid())
        for d in cgroup_dirs:
            write_control_file(os.path.join(d, "cgroup.procs"), pid)
        set_parent_death_signal(signal.SIGKILL)
        for res, pair in pairs:
            resource.setrlimit(res, pair)

    return preexec


def kill_process_group(pid: int) -> None:
    """SIGKILL the process group led by `pid` (bwrap is started as a session leader).
    bwrap's `--die-with-parent` then takes down the sandbox's pid namespace, and with it
    every process inside, including ones that called setsid() to escape the group."""
    for target in (lambda: os.killpg(pid, signal.SIGKILL), lambda: os.kill(pid, signal.SIGKILL)):
        try:
            target()
        except (ProcessLookupError, PermissionError):
            pass
