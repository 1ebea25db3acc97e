"""Feasibility probe (not used by piexp): a warm, pre-isolated Python interpreter that
forks per run into fresh namespaces, against bare spawn of the same program.

What it does (Linux, as root, with the interpreter the sandbox runs, e.g.
`$(python3 -c 'import sys,os;print(os.path.realpath(sys.executable))') bench/sandbox_warm_probe.py`):
- once: a "forkserver" child unshares a mount namespace, builds a read-only root (tmpfs
  with read-only binds of /usr, the /etc entries, the interpreter's prefix; the run
  directories' parent bound at /runs), pivots into it, and imports what `site` imports;
- per run: fork; the child unshares user, mount, pid, net, ipc, uts and cgroup
  namespaces, maps uid/gid 65534, binds its run dir at /sandbox and hides /runs under an
  empty tmpfs, mounts a private size-capped /tmp, forks again to become pid 1 of the new
  pid namespace, mounts /proc, sets rlimits, drops every capability, sets
  no_new_privs, clears the environment, points fds 0-2 at its run's pipes and runs the
  program with `runpy` (no exec: the interpreter is already warm).

It prints latency per run for bare spawn and for the warm fork, interleaved. What it
does NOT do (so it is no sandbox yet): block nested user namespaces (bwrap's
--disable-userns), cgroups (the memory/pids limits), a reaping init separate from the
program, a time limit, and the server protocol. bench/sandbox.py measures the zygote
launcher piexp uses instead (a small C process, whose forks cost less than CPython's).
"""

from __future__ import annotations

import argparse
import ctypes
import os
import resource
import shutil
import signal
import statistics
import sys
import tempfile
import time

libc = ctypes.CDLL(None, use_errno=True)
CLONE_NEWNS, CLONE_NEWCGROUP, CLONE_NEWUTS, CLONE_NEWIPC = 0x20000, 0x2000000, 0x4000000, 0x8000000
CLONE_NEWUSER, CLONE_NEWPID, CLONE_NEWNET = 0x10000000, 0x20000000, 0x40000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = (
    1,
    2,
    4,
    8,
    32,
    4096,
    16384,
    1 << 18,
)
PR_SET_NO_NEW_PRIVS = 38

PROGRAM = "import sys\nn = int(open('n.txt').read())\nprint(sum(i * i for i in range(n)))\n"


def _check(rc: int, what: str) -> None:
    if rc != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def mount(src, target, fstype, flags, data=None) -> None:
    enc = lambda s: s.encode() if s is not None else None  # noqa: E731
    _check(libc.mount(enc(src), enc(target), enc(fstype), ctypes.c_ulong(flags), enc(data)), f"mount {target}")


def unshare(flags: int) -> None:
    _check(libc.unshare(flags), "unshare")


def drop_capabilities() -> None:
    class Header(ctypes.Structure):
        _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]

    class Data(ctypes.Structure):
        _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]

    hdr, data = Header(0x20080522, 0), (Data * 2)()
    _check(libc.capset(ctypes.byref(hdr), ctypes.byref(data)), "capset")
    _check(libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "no_new_privs")


def build_root(runs_dir: str) -> None:
    """Once, in the forkserver: a read-only root with the system and /runs."""
    unshare(CLONE_NEWNS)
    mount(None, "/", None, MS_REC | MS_PRIVATE)
    base = tempfile.mkdtemp(prefix="warm-root-")
    mount("tmpfs", base, "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755")
    prefix = os.path.realpath(sys.base_prefix)
    for d in ("usr", "sandbox", "tmp", "proc", "runs", "dev", "etc", "oldroot", prefix.lstrip("/")):
        os.makedirs(os.path.join(base, d), exist_ok=True)
    mount("/usr", f"{base}/usr", None, MS_BIND | MS_REC)
    mount(prefix, f"{base}{prefix}", None, MS_BIND | MS_REC)
    mount(runs_dir, f"{base}/runs", None, MS_BIND)
    for name in ("bin", "lib", "lib64", "sbin"):
        if os.path.islink(f"/{name}"):
            os.symlink(os.readlink(f"/{name}"), f"{base}/{name}")
    for entry in ("/etc/ld.so.cache", "/etc/localtime", "/etc/nsswitch.conf"):
        if os.path.exists(entry):
            open(base + entry, "w").close()
            mount(entry, base + entry, None, MS_BIND)
    # The forkserver's own /proc (for /proc/self/uid_map); each run mounts its own over it.
    mount("proc", f"{base}/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
    open(f"{base}/dev/null", "w").close()
    mount("/dev/null", f"{base}/dev/null", None, MS_BIND)
    for ro in ("/usr", prefix):
        mount(None, base + ro, None, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV)
    os.chdir(base)
    _check(libc.syscall(155, b".", b"oldroot"), "pivot_root")  # SYS_pivot_root (x86_64)
    os.chroot(".")
    _check(libc.umount2(b"/oldroot", 2), "umount oldroot")  # MNT_DETACH
    os.rmdir("/oldroot")
    mount(None, "/", None, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV)
    os.chdir("/")


def run_forked(run_id: str, out_fd: int, err_fd: int) -> int:
    """Fork one run from the warm interpreter; returns the (outer) child's pid."""
    pid = os.fork()
    if pid:
        return pid
    try:
        uid, gid = os.getuid(), os.getgid()
        unshare(
            CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWNET | CLONE_NEWIPC | CLONE_NEWUTS | CLONE_NEWCGROUP
        )
        with open("/proc/self/setgroups", "w") as f:
            f.write("deny")
        with open("/proc/self/uid_map", "w") as f:
            f.write(f"65534 {uid} 1")
        with open("/proc/self/gid_map", "w") as f:
            f.write(f"65534 {gid} 1")
        mount(f"/runs/{run_id}", "/sandbox", None, MS_BIND)
        mount("tmpfs", "/runs", "tmpfs", MS_NOSUID | MS_NODEV | MS_RDONLY, "size=0")
        mount("tmpfs", "/tmp", "tmpfs", MS_NOSUID | MS_NODEV, f"size={256 << 20},mode=1777")
        inner = os.fork()  # the first child of the new pid namespace is its pid 1
        if inner:
            _, status = os.waitpid(inner, 0)
            os._exit(os.waitstatus_to_exitcode(status) & 0xFF)
        mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
        for res, lim in (
            (resource.RLIMIT_CORE, 0),
            (resource.RLIMIT_NOFILE, 256),
            (resource.RLIMIT_NPROC, 256),
            (resource.RLIMIT_FSIZE, 64 << 20),
            (resource.RLIMIT_CPU, 11),
        ):
            resource.setrlimit(res, (lim, lim))
        drop_capabilities()
        os.chdir("/sandbox")
        nul = os.open("/dev/null", os.O_RDONLY)
        os.dup2(nul, 0)
        os.dup2(out_fd, 1)
        os.dup2(err_fd, 2)
        os.closerange(3, 1 << 16)
        os.environ.clear()
        os.environ.update({"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": "/tmp", "LANG": "C.UTF-8"})
        import runpy

        sys.argv = ["_sandbox_main.py"]
        sys.path[0] = "/sandbox"
        code = 0
        try:
            runpy.run_path("_sandbox_main.py", run_name="__main__")
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        except BaseException:  # noqa: BLE001
            import traceback

            traceback.print_exc()
            code = 1
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    except BaseException as exc:  # noqa: BLE001
        os.write(2, f"warm child setup failed: {exc!r}\n".encode())
        os._exit(125)


def forkserver(runs_dir: str, ctl_r: int, res_w: int) -> None:
    build_root(runs_dir)  # `site` (and whatever its .pth files import) already ran

    with os.fdopen(ctl_r, "r") as ctl:
        for line in ctl:
            run_id = line.strip()
            r, w = os.pipe()
            t0 = time.perf_counter()
            pid = run_forked(run_id, w, w)
            os.close(w)
            out = b""
            while chunk := os.read(r, 65536):
                out += chunk
            os.close(r)
            os.waitpid(pid, 0)
            os.write(res_w, f"{(time.perf_counter() - t0) * 1e3:.3f} {out.strip().decode()!r}\n".encode())


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--runs", type=int, default=40)
    p.add_argument("--show", help="instead: run this program once in the warm fork and print its output")
    args = p.parse_args()
    if os.geteuid() != 0:
        print("run as root (the probe builds its root with mount(2))", file=sys.stderr)
        return 2
    import subprocess

    # Bare spawn uses this very interpreter, so both sides run the same `site`: run the
    # probe with the runtime the sandbox uses (the base interpreter, not a venv).
    exe = os.path.realpath(sys.executable)
    runs_dir = tempfile.mkdtemp(prefix="warm-runs-")
    os.chmod(runs_dir, 0o755)
    ctl_r, ctl_w = os.pipe()
    res_r, res_w = os.pipe()
    server = os.fork()
    if server == 0:
        os.close(ctl_w)
        os.close(res_r)
        try:
            forkserver(runs_dir, ctl_r, res_w)
        except BaseException:  # noqa: BLE001
            import traceback

            traceback.print_exc()
        finally:
            os._exit(0)
    os.close(ctl_r)
    os.close(res_w)
    res = os.fdopen(res_r, "r")
    env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": "/tmp", "LANG": "C.UTF-8"}
    bare, warm = [], []
    if args.show:
        os.mkdir(os.path.join(runs_dir, "show"))
        shutil.copy(args.show, os.path.join(runs_dir, "show", "_sandbox_main.py"))
        os.write(ctl_w, b"show\n")
        print(eval(res.readline().split(" ", 1)[1]))  # noqa: S307 - our own repr
        os.close(ctl_w)
        os.waitpid(server, 0)
        shutil.rmtree(runs_dir, ignore_errors=True)
        return 0
    try:
        for i in range(args.runs + 2):
            d = os.path.join(runs_dir, f"run-{i}")
            os.mkdir(d)
            for name, text in (("n.txt", "1000"), ("_sandbox_main.py", PROGRAM)):
                with open(os.path.join(d, name), "w") as f:
                    f.write(text)
            t0 = time.perf_counter()
            out = subprocess.run(
                [exe, "_sandbox_main.py"], cwd=d, env=env, capture_output=True, start_new_session=True
            ).stdout
            tb = (time.perf_counter() - t0) * 1e3
            assert out.strip() == b"332833500", out
            t0 = time.perf_counter()
            os.write(ctl_w, f"run-{i}\n".encode())
            inner_ms, text = res.readline().split(" ", 1)
            tw = (time.perf_counter() - t0) * 1e3
            assert "332833500" in text, text
            shutil.rmtree(d)
            if i >= 2:
                bare.append(tb)
                warm.append(tw)
    finally:
        os.close(ctl_w)
        os.waitpid(server, 0)
        shutil.rmtree(runs_dir, ignore_errors=True)
    for name, xs in (("bare spawn", bare), ("warm fork (fresh namespaces)", warm)):
        xs.sort()
        print(
            f"{name:30s} p50 {statistics.median(xs):7.2f} ms  p10 {xs[len(xs) // 10]:7.2f}  p90 {xs[len(xs) * 9 // 10]:7.2f}"
        )
    print(f"ratio bare_p50 / warm_p50: {statistics.median(bare) / statistics.median(warm):.2f}")
    from record import record

    rows = [[name, *(f"{v:.2f}" for v in (statistics.median(xs), xs[len(xs) // 10], xs[len(xs) * 9 // 10]))]
            for name, xs in (("bare spawn", bare), ("warm fork (fresh namespaces)", warm))]  # fmt: skip
    notes = [f"ratio bare_p50 / warm_p50: {statistics.median(bare) / statistics.median(warm):.2f}"]
    record(
        __file__, [{"title": "latency per run", "columns": ["way", "p50 ms", "p10 ms", "p90 ms"], "rows": rows}], notes
    )
    return 0


if __name__ == "__main__":
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    sys.exit(main())
