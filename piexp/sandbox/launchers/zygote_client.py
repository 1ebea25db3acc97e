"""The zygote process and its control socket: zygote.c, compiled once per source version
into piexp's cache, holds the sandbox's read-only root and starts every run in fresh
namespaces inside it when asked over a SOCK_SEQPACKET socket; `Zygote` starts it, sends
run requests (with the run's fds) and reads back each run's init pid. The zygote's
children are the *server's* children (CLONE_PARENT): the server waits for and reaps a
run's init like any child it started."""

from __future__ import annotations

import array
import asyncio
import logging
import os
import socket
import subprocess
from dataclasses import dataclass
from importlib import resources
from typing import Mapping, Optional, Sequence

from ..c_build import CBuildError, c_binary
from ..isolation.layout import SANDBOX_ENV, launcher_env
from ..isolation.process import kill_process_group
from ..spawn import reap_pid

log = logging.getLogger(__name__)

# The zygote's sources, compiled together (zygote.h is what the two .c files share).
_SOURCES = ("zygote.c", "zygote_root.c", "zygote.h")
_START_TIMEOUT_S = 10.0
_REPLY_LIMIT = 512


@dataclass(frozen=True)
class TmpSpec:
    """A run's /tmp: `dir_name`, a directory in the runs dir bound there (the run area's
    capped tmpfs), or "" for a fresh tmpfs of `size_bytes` and `inodes`."""

    dir_name: str
    size_bytes: int
    inodes: int


@dataclass(frozen=True)
class RunRequest:
    """One run for the zygote to start (see zygote.c): the run directory's name under the
    runs dir, the program's argv and env, its rlimits ((resource, (soft, hard)) pairs),
    its /tmp, the init's wall-clock alarm in seconds, and `fds`: stdin, stdout, stderr,
    the status pipe's write end, then the cgroup files to join."""

    run_name: str
    argv: Sequence[str]
    env: Mapping[str, str]
    rlimits: Sequence[tuple[int, tuple[int, int]]]
    tmp: TmpSpec
    wall_s: int
    fds: Sequence[int]

    def message(self) -> bytes:
        """The request's fields as the zygote reads them (the fds travel beside it)."""
        return _fields(
            [
                self.run_name,
                self.tmp.dir_name,
                self.tmp.size_bytes,
                self.tmp.inodes,
                self.wall_s,
                len(self.rlimits),
                *[v for res, (soft, hard) in self.rlimits for v in (res, soft, hard)],
                len(self.argv),
                *self.argv,
                len(self.env),
                *[f"{k}={v}" for k, v in self.env.items()],
            ]
        )


class ZygoteError(OSError):
    """The zygote could not be built, started, or answer a request."""


class ZygoteRefusal(ZygoteError):
    """The zygote is alive but would not start a run (a malformed request, clone failed)."""


def zygote_binary() -> str:
    """The compiled zygote for this source, compiling it first if needed (a second or so,
    once per source version: the file name carries the source's hash). Raises
    ZygoteError saying why when there is no C compiler or the build fails."""
    sources = {name: resources.files(__package__).joinpath(name).read_bytes() for name in _SOURCES}
    try:
        return c_binary("piexp-zygote", sources)
    except CBuildError as exc:
        raise ZygoteError(f"the sandbox zygote: {exc}") from exc


def setup_failure(status_r: int) -> str:
    """What a run's init wrote to its status pipe before giving up (it starts no program
    then); "" when it started the program (the pipe closed on exec, empty). Read once the
    init has exited."""
    os.set_blocking(status_r, False)
    try:
        return os.read(status_r, 4096).decode(errors="replace")
    except BlockingIOError:
        return ""


def _fields(values: Sequence[object]) -> bytes:
    for value in values:
        if "\0" in str(value):
            raise ZygoteError("a request field contains a NUL byte")
    return b"".join(str(v).encode() + b"\0" for v in values)


class Zygote:
    """A started zygote and its control socket. `start` builds the root; `spawn` starts
    a run and returns its init's pid (a child of this process).

    What a run gets is what bwrap gives it (tests/sandbox runs the adversarial suite
    against both launchers): new mount, pid, ipc, net, uts and cgroup namespaces,
    uid/gid 65534 in a user namespace (mapped to the unprivileged run user: a server
    running as root starts the zygote as that user) whose own limit forbids nested user
    namespaces, the syscall filter, read-only /proc/sys and its kin, the read-only
    system layout of `isolation.layout.root_layout`, a read-only /dev, a private
    size-capped /tmp, the run directory at /sandbox, the run's own /proc, rlimits,
    no_new_privs, an empty capability bounding set, a new session, the cgroups joined
    before anything runs, and death with the server. Differences, all deliberate: one
    user namespace is shared by the runs of a server (each run still has its own pid,
    mount, ipc and net namespace, so no run can name, signal, trace or reach another's
    files); /dev has no pts/ptmx, and /dev/shm is the run's /tmp."""

    def __init__(self, proc: subprocess.Popen, control: socket.socket) -> None:
        self.proc = proc
        self._control = control
        self._lock: Optional[asyncio.Lock] = None

    @classmethod
    def start(
        cls,
        runs_dir: str,
        layout: Sequence[tuple[str, str, str]],
        *,
        filter_fd: int = -1,
        user: Optional[tuple[int, int]] = None,
        binary: Optional[str] = None,
    ) -> "Zygote":
        """Start the zygote for run directories directly under `runs_dir`, with the root
        built from `layout` ((kind, a, b): B bind read-only, S symlink, F copy a file),
        `filter_fd` (a file holding the runs' seccomp filter, read to its end; -1: none)
        and, for a server running as root, `user` (uid, gid): the unprivileged host user
        the zygote and so every run is. Must be called from the thread that outlives
        every run (the main thread): the runs' inits die when the thread that started
        the zygote does (PR_SET_PDEATHSIG). `binary`: the compiled zygote, if not the
        cache's (a copy the run user can execute)."""
        binary = binary or zygote_binary()
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        argv = [binary, str(theirs.fileno()), os.path.realpath(runs_dir), str(filter_fd)]
        for row in layout:
            argv.extend(row)
        try:
            proc = subprocess.Popen(
                argv,
                pass_fds=(theirs.fileno(), *([filter_fd] if filter_fd >= 0 else [])),
                env=launcher_env(),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                start_new_session=True,
                user=user[0] if user else None,
                group=user[1] if user else None,
                extra_groups=[] if user else None,
            )
        except OSError as exc:
            ours.close()
            raise ZygoteError(f"could not start the sandbox zygote: {exc}") from exc
        finally:
            theirs.close()
        ours.settimeout(_START_TIMEOUT_S)
        try:
            answer = ours.recv(_REPLY_LIMIT)
        except OSError:
            answer = b""
        if answer != b"ready":
            ours.close()
            proc.kill()
            _, err = proc.communicate()
            raise ZygoteError(
                f"the sandbox zygote did not start: {err.decode(errors='replace').strip() or 'no answer'}"
            )
        assert proc.stderr is not None  # stderr=PIPE
        proc.stderr.close()  # it only ever writes there while setting up
        ours.setblocking(False)
        return cls(proc, ours)

    def request(self, run: RunRequest) -> None:
        """Send one run request, its fds with it."""
        try:
            self._control.sendmsg([run.message()], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", run.fds))])
        except OSError as exc:
            raise ZygoteError(f"the sandbox zygote is gone: {exc}") from exc

    @staticmethod
    def _parse_reply(answer: bytes) -> int:
        text = answer.decode(errors="replace")
        if not answer:
            raise ZygoteError("the sandbox zygote is gone")
        if text.startswith("!") or not text.isdigit():
            raise ZygoteRefusal(f"the sandbox zygote refused a run: {text.lstrip('!')}")
        return int(text)

    async def spawn(self, run: RunRequest) -> int:
        """Start a run; its init's pid (a child of this process). Requests are answered
        in order, so one is in flight at a time (the zygote answers in ~0.1 ms). A caller
        cancelled while its request is in flight leaves no orphan and no stray answer:
        the answer is still read (before the next request may go), and the run it
        started is killed and reaped."""
        loop = asyncio.get_running_loop()
        if self._lock is None:
            self._lock = asyncio.Lock()
        lock = self._lock
        await lock.acquire()
        try:
            self.request(run)
        except BaseException:
            lock.release()
            raise
        answer = loop.create_task(loop.sock_recv(self._control, _REPLY_LIMIT))
        answer.add_done_callback(lambda _: lock.release())
        try:
            reply = await asyncio.shield(answer)
        except asyncio.CancelledError:
            answer.add_done_callback(self._kill_unclaimed_run)
            raise
        except OSError as exc:
            raise ZygoteError(f"the sandbox zygote is gone: {exc}") from exc
        return self._parse_reply(reply)

    @staticmethod
    def _kill_unclaimed_run(answer: asyncio.Task) -> None:
        """The run started for a cancelled caller: kill its namespace, reap its init."""
        if answer.cancelled() or answer.exception() is not None:
            return
        try:
            pid = Zygote._parse_reply(answer.result())
        except ZygoteError:
            return
        kill_process_group(pid)
        asyncio.get_running_loop().run_in_executor(None, os.waitpid, pid, 0)

    def spawn_blocking(self, run: RunRequest) -> int:
        """`spawn` outside the event loop."""
        self.request(run)
        self._control.setblocking(True)
        self._control.settimeout(_START_TIMEOUT_S)
        try:
            answer = self._control.recv(_REPLY_LIMIT)
        except OSError as exc:
            raise ZygoteError(f"the sandbox zygote did not answer: {exc}") from exc
        finally:
            self._control.setblocking(False)
        return self._parse_reply(answer)

    def run_blocking(
        self,
        run_name: str,
        argv: Sequence[str],
        stdio: Sequence[int],
        *,
        rlimits: Sequence[tuple[int, tuple[int, int]]] = (),
        tmp: Optional[TmpSpec] = None,
        wall_s: int = 10,
        joins: Sequence[int] = (),
    ) -> tuple[int, str]:
        """Start a run outside the event loop (SANDBOX_ENV, `stdio` as its fds 0-2) and
        wait for it: (exit code, what its init wrote to the status pipe before giving up;
        "" when the program started). For start-up checks and benchmarks."""
        status_r, status_w = os.pipe2(os.O_CLOEXEC)
        try:
            try:
                pid = self.spawn_blocking(
                    RunRequest(
                        run_name,
                        argv,
                        SANDBOX_ENV,
                        rlimits,
                        tmp or TmpSpec("", 1 << 20, 64),
                        wall_s,
                        [*stdio, status_w, *joins],
                    )
                )
            finally:
                os.close(status_w)  # the run holds its own copy until it execs or gives up
            return reap_pid(pid), setup_failure(status_r)
        finally:
            os.close(status_r)

    def close(self) -> None:
        """EOF on its socket ends the zygote; reap it."""
        self._control.close()
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:  # pragma: no cover
            self.proc.kill()
            self.proc.wait()
