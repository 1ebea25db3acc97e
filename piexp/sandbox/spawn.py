"""Starting the server's children and handing them to the event loop: `Spawner` starts
bwrap (or an unisolated program) with `subprocess.Popen`, from one long-lived thread
that first joins the run's cgroup v1 hierarchies (a thread writing "0" to `tasks` moves
only itself, without the kernel's global rwsem; a child inherits its starting thread's
cgroups; it is not the main thread, whose cgroup the v1 memory controller charges the
server's pages to; it lives as long as the runner because bwrap's --die-with-parent
binds each sandbox to the thread that started it), and `SpawnedChild` is the asyncio
view of such a child (stream readers, a stdin writer, a pidfd-based `wait`); a zygote
run's init, the server's child too, is wrapped the same way (`adopt`)."""

from __future__ import annotations

import asyncio
import logging
import os
import subprocess
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Callable, Optional, Sequence

from .isolation.cgroups import write_control_file
from .isolation.process import kill_process_group

log = logging.getLogger(__name__)

_PIPE_LIMIT = 1 << 16


def join_cgroups_v1(tasks_files: Sequence[str]) -> None:
    """Move the calling thread into each cgroup v1 hierarchy whose `tasks` file is given."""
    for path in tasks_files:
        write_control_file(path, "0")


class SpawnedChild:
    """A started child with asyncio streams; the part of asyncio.subprocess.Process the
    runner uses (pid, stdin, stdout, stderr, returncode, wait).

    `reap` blocks until the child has exited, reaps it and returns its exit code;
    `group_outlives_it`: whether the process group it leads can outlive it (bwrap's
    sandbox init does; a zygote run's init takes its namespace down as it exits), so
    that killing it is still meaningful after it has been reaped."""

    def __init__(
        self, pid: int, reap: Callable[[], int], stdout, stderr, stdin, transports: list, group_outlives_it: bool = True
    ) -> None:
        self.pid = pid
        self._reap = reap
        self.returncode: Optional[int] = None
        self.group_outlives_it = group_outlives_it
        self.joined_cgroups = False  # started inside the cgroups it was asked to join
        self.stdout: asyncio.StreamReader = stdout
        self.stderr: asyncio.StreamReader = stderr
        self.stdin: Optional[asyncio.StreamWriter] = stdin
        self._transports = transports
        self._exited: Optional[asyncio.Future] = None
        self._pidfd = -1

    async def wait(self) -> int:
        """Wait for the child to exit and reap it; cancelling a waiter leaves the watch
        in place for the next one."""
        if self.returncode is not None:
            return self.returncode
        loop = asyncio.get_running_loop()
        if self._exited is None:
            exited = self._exited = loop.create_future()
            try:
                self._pidfd = os.pidfd_open(self.pid)
            except (AttributeError, OSError):  # pragma: no cover - kernels before 5.3
                fut = loop.run_in_executor(None, self._reap_now)
                fut.add_done_callback(lambda f: None if exited.done() else exited.set_result(None))
            else:
                loop.add_reader(self._pidfd, self._on_exit)
        await asyncio.shield(self._exited)
        assert self.returncode is not None  # set by the reaping before _exited completes
        return self.returncode

    def _reap_now(self) -> None:
        self.returncode = self._reap()

    def _on_exit(self) -> None:
        loop = asyncio.get_running_loop()
        loop.remove_reader(self._pidfd)
        os.close(self._pidfd)
        self._pidfd = -1
        self._reap_now()  # the pidfd is readable: the child is a zombie, this reaps it
        if self._exited is not None and not self._exited.done():
            self._exited.set_result(None)

    def kill(self) -> None:
        """SIGKILL its process group (and it), unless it is reaped and took its group with it."""
        if self.returncode is None or self.group_outlives_it:
            kill_process_group(self.pid)

    async def kill_and_wait(self) -> None:
        """SIGKILL the sandbox's process group (bwrap, or a zygote run's init, leads its
        own session) and reap its leader."""
        self.kill()
        if self.returncode is None:
            try:
                async with asyncio.timeout(5):
                    await self.wait()
            except TimeoutError:  # pragma: no cover
                log.error("sandbox pid %d did not die after SIGKILL", self.pid)

    def close(self) -> None:
        """Close the pipes' transports (a reader cancelled before EOF leaves its own open)."""
        for transport in self._transports:
            transport.close()
        self._transports = []


def _discard_started(started) -> None:
    if started.cancelled() or started.exception() is not None:
        return
    popen = started.result()
    kill_process_group(popen.pid)
    for pipe in (popen.stdin, popen.stdout, popen.stderr):
        if pipe is not None:
            pipe.close()
    asyncio.get_running_loop().run_in_executor(None, popen.wait)


def reap_pid(pid: int) -> int:
    """Wait for child `pid`, reap it, return its exit code (-N when killed by signal N)."""
    return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])


async def adopt(
    pid: int, reap: Callable[[], int], stdout, stderr, stdin=None, *, group_outlives_it: bool = True
) -> SpawnedChild:
    """Wrap a started child: `stdout`/`stderr` (and `stdin`) are its pipes' other ends,
    as file objects."""
    loop = asyncio.get_running_loop()
    transports: list[asyncio.BaseTransport] = []

    async def reader(pipe) -> asyncio.StreamReader:
        stream = asyncio.StreamReader(limit=_PIPE_LIMIT, loop=loop)
        transport, _ = await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(stream, loop=loop), pipe)
        transports.append(transport)
        return stream

    try:
        out = await reader(stdout)
        err = await reader(stderr)
        writer = None
        if stdin is not None:
            write_transport, protocol = await loop.connect_write_pipe(
                lambda: asyncio.StreamReaderProtocol(asyncio.StreamReader(loop=loop), loop=loop),
                stdin,
            )
            transports.append(write_transport)
            writer = asyncio.StreamWriter(write_transport, protocol, None, loop)
    except BaseException:
        for transport in transports:
            transport.close()
        raise
    return SpawnedChild(pid, reap, out, err, writer, transports, group_outlives_it)


class Spawner:
    """Starts children, optionally from the dedicated cgroup-joining thread.

    `home_tasks`: the `tasks` files of the server's own cgroups (every hierarchy a run
    joins), where the thread returns after each start; None disables joining (callers
    then move the child themselves, see `isolation.confine_blocked_child`)."""

    def __init__(self, home_tasks: Optional[list[str]], user: Optional[tuple[int, int]] = None) -> None:
        self.home_tasks = home_tasks
        # (uid, gid) children started `as_run_user` get (a server running as root hands
        # runs to an unprivileged user); None: the server's own.
        self.user = user
        self._thread: Optional[ThreadPoolExecutor] = None

    @property
    def joins_cgroups(self) -> bool:
        return self.home_tasks is not None

    def _start(
        self, argv: list[str], options: dict, join_tasks: Sequence[str], home_tasks: Sequence[str]
    ) -> subprocess.Popen:
        try:
            if join_tasks:
                join_cgroups_v1(join_tasks)
            return subprocess.Popen(
                argv,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                start_new_session=True,
                close_fds=True,
                **options,
            )
        finally:
            if join_tasks:
                try:
                    join_cgroups_v1(home_tasks)
                except OSError as exc:
                    # Never start another child from a thread stuck in a run's cgroups.
                    log.error(
                        "spawner thread %s could not return to the server's cgroups (%s); "
                        "runs now join their cgroups the slow way",
                        threading.get_native_id(),
                        exc,
                    )
                    self.home_tasks = None

    async def spawn(
        self,
        argv: list[str],
        *,
        env: dict,
        pass_fds: Sequence[int] = (),
        stdin_pipe: bool = False,
        join_tasks: Sequence[str] = (),
        cwd: Optional[str] = None,
        preexec_fn: Optional[Callable[[], None]] = None,
        as_run_user: bool = False,
    ) -> SpawnedChild:
        """Start `argv` in a new session with piped stdout/stderr (and stdin if asked),
        first joining `join_tasks` (cgroup v1 `tasks` files) when this spawner can; the
        child's `joined_cgroups` says whether it did (if not, the caller moves it).
        `as_run_user`: as the spawner's run user. Both that and `preexec_fn` (only for
        unisolated runs) make CPython fork instead of vfork."""
        options = dict(
            stdin=subprocess.PIPE if stdin_pipe else subprocess.DEVNULL,
            env=env,
            pass_fds=tuple(pass_fds),
            cwd=cwd,
            preexec_fn=preexec_fn,
        )
        if as_run_user and self.user is not None:
            options.update(user=self.user[0], group=self.user[1], extra_groups=[])
        home = self.home_tasks
        joined = bool(join_tasks) and home is not None
        if joined and home is not None:
            if self._thread is None:
                self._thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="piexp-sandbox-spawner")
            started = asyncio.get_running_loop().run_in_executor(
                self._thread,
                self._start,
                argv,
                options,
                list(join_tasks),
                list(home),
            )
            try:
                popen = await asyncio.shield(started)
            except asyncio.CancelledError:
                # The caller is gone (its client hung up): the child it would have had
                # is killed and reaped once it exists, its pipes closed.
                started.add_done_callback(_discard_started)
                raise
        else:
            popen = self._start(argv, options, (), ())
        try:
            child = await adopt(popen.pid, popen.wait, popen.stdout, popen.stderr, popen.stdin)
            child.joined_cgroups = joined
            return child
        except BaseException:
            kill_process_group(popen.pid)  # bwrap leads its own session
            popen.wait()
            raise

    def close(self) -> None:
        if self._thread is not None:
            self._thread.shutdown(wait=False)
            self._thread = None
