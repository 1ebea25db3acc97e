"""What a run can do to the host when the server runs as root (as in CI): nothing that
needs a host user id, a kernel knob, a keyring, a syscall outside the filter, more disk
or inodes than its quota, or a cleanup that fails or lingers. Each test is a hostile
program (or a server crash), against both launchers."""

from __future__ import annotations

import os
import signal
import stat
import threading
import time

import pytest

from piexp.sandbox import EmbeddedSandbox
from piexp.sandbox.run_area import AREA_PREFIX, RunUser
from piexp.sandbox.run_dir import remove_tree
from piexp.sandbox.settings import SandboxSettings

RUN_USER = RunUser.for_server(SandboxSettings().run_uid, SandboxSettings().run_gid)
as_root = pytest.mark.skipif(os.geteuid() != 0, reason="the server runs unprivileged here: runs are its own uid")


def _host_ids(pid: int) -> tuple[list[int], list[int]]:
    with open(f"/proc/{pid}/status") as f:
        rows = dict(line.split(":", 1) for line in f)
    return [int(x) for x in rows["Uid"].split()], [int(x) for x in rows["Gid"].split()]


def test_a_run_is_the_run_user_on_the_host_and_owns_what_it_makes(sandbox, marker, pids_with, wait_until):
    """The program's real, effective, saved and file-system ids on the host are the run
    user's (never 0 when the server is root), and so is every file it creates, setuid
    bit or not; its directories are 0700 in a 0700 area of the run user's."""
    code = (
        f"import os, time\nopen('{marker}', 'w').write('x')\nos.chmod('{marker}', 0o4755)\ntime.sleep(4)  # {marker}\n"
    )
    holder = threading.Thread(target=sandbox.run, args=(code,), daemon=True)
    holder.start()
    path = wait_until(
        "the run's file",
        lambda: next(
            (os.path.join(d, marker) for d in sandbox.run_dirs() if os.path.exists(os.path.join(d, marker))), None
        ),
    )
    pid = wait_until("the run's process", lambda: next(iter(pids_with("_sandbox_main.py")), None))  # the only run now
    uids, gids = _host_ids(pid)
    assert set(uids) == {RUN_USER.uid} and set(gids) == {RUN_USER.gid}, (uids, gids)
    st = os.stat(path)
    assert (st.st_uid, st.st_gid) == (RUN_USER.uid, RUN_USER.gid) and st.st_mode & stat.S_ISUID
    run_dir = os.path.dirname(path)
    area = os.path.dirname(run_dir)
    for d in (run_dir, area):
        st = os.stat(d)
        assert stat.S_IMODE(st.st_mode) == 0o700 and st.st_uid == RUN_USER.uid, (d, oct(st.st_mode), st.st_uid)
    holder.join()
    sandbox.assert_clean()


def test_uid_map_never_names_host_root(sandbox):
    """Inside, 65534 maps to the run user (the zygote) or to an intermediate namespace of
    bwrap's that maps to it; never `65534 0 1` in the host's terms: checked by the
    ownership test above. Here: the map has one line and the uid is 65534."""
    out = sandbox.run("import os\nprint(os.getuid(), open('/proc/self/uid_map').read().split())")
    uid, rest = out["run_result"]["stdout"].split(" ", 1)
    assert uid == "65534" and rest.count("'1'") == 1, out
    if sandbox.launcher == "zygote":
        assert rest.strip() == str(["65534", str(RUN_USER.uid), "1"]), rest


def test_kernel_knobs_are_read_only_and_root_files_closed(sandbox):
    """Writing a sysctl (its own current value, so that nothing changes if it got
    through), core_pattern or sysrq-trigger fails; /proc/slabinfo (root-only) is not
    readable."""
    code = (
        "import os\n"
        "for path in ('/proc/sys/kernel/printk_ratelimit_burst', '/proc/sys/kernel/core_pattern',\n"
        "             '/proc/sys/vm/drop_caches', '/proc/sysrq-trigger'):\n"
        "    try:\n"
        "        value = open(path).read() if 'sysrq' not in path and 'drop' not in path else '0'\n"
        "    except OSError:\n"
        "        value = '0'\n"
        "    try:\n"
        "        with open(path, 'w') as f:\n"
        "            f.write(value)\n"
        "        print('WROTE', path)\n"
        "    except OSError as e:\n"
        "        print('refused', path, e.errno)\n"
        "try:\n"
        "    open('/proc/slabinfo').read(); print('READ slabinfo')\n"
        "except OSError as e:\n"
        "    print('refused slabinfo', e.errno)\n"
    )
    out = sandbox.run(code)["run_result"]["stdout"]
    assert "WROTE" not in out and "READ" not in out and out.count("refused") == 5, out


def test_run_directories_are_nosuid_and_nodev(sandbox):
    code = (
        "import os\n"
        "for d in ('/sandbox', '/tmp'):\n"
        "    flags = os.statvfs(d).f_flag\n"
        "    print(d, bool(flags & os.ST_NOSUID), bool(flags & os.ST_NODEV))\n"
    )
    assert sandbox.run(code)["run_result"]["stdout"] == "/sandbox True True\n/tmp True True\n"


def test_syscall_filter_refuses_keyrings_io_uring_and_ptrace(sandbox):
    """Keyrings (shared by the runs of one user namespace, and charged to the host
    user's quota), io_uring, ptrace of its own init, perf and bpf: all EPERM."""
    code = (
        "import ctypes, os\n"
        "libc = ctypes.CDLL(None, use_errno=True)\n"
        "calls = {\n"
        "    'add_key': (248, b'user', b'piexp', b'secret', 6, -3),\n"  # KEY_SPEC_SESSION... -3
        "    'keyctl': (250, 0, -3),\n"  # KEYCTL_GET_KEYRING_ID of the session keyring
        "    'io_uring_setup': (425, 8, ctypes.create_string_buffer(120)),\n"
        "    'ptrace_attach_init': (101, 16, 1, 0, 0),\n"  # PTRACE_ATTACH pid 1
        "    'perf_event_open': (298, ctypes.create_string_buffer(128), 0, -1, -1, 0),\n"
        "    'bpf': (321, 0, ctypes.create_string_buffer(64), 64),\n"
        "}\n"
        "for name, args in calls.items():\n"
        "    rc = libc.syscall(*args)\n"
        "    print(name, rc, ctypes.get_errno())\n"
    )
    if os.uname().machine != "x86_64":
        pytest.skip("the probe uses x86_64 syscall numbers")
    out = sandbox.run(code)["run_result"]["stdout"].splitlines()
    assert out == [
        f"{name} -1 1"
        for name in ("add_key", "keyctl", "io_uring_setup", "ptrace_attach_init", "perf_event_open", "bpf")
    ], out


def test_a_tree_too_deep_for_recursion_is_removed(sandbox):
    """2,000 nested directories (made with relative mkdir+chdir, so no path is long),
    some 000, in /sandbox and /tmp: the run's directories still go."""
    code = (
        "import os\n"
        "for top in ('/sandbox/deep', '/tmp/deep'):\n"
        "    os.mkdir(top); os.chdir(top)\n"
        "    for i in range(2000):\n"
        "        os.mkdir('d'); os.chdir('d')\n"
        "        open('f', 'w').close()\n"
        "    os.chdir('/sandbox')\n"
        "os.chmod('/sandbox/deep/d/d', 0)\n"
        "print('made')\n"
    )
    resp = sandbox.run(code, run_timeout=60)
    assert resp["run_result"]["stdout"] == "made\n", resp
    sandbox.assert_clean()


def test_remove_tree_has_no_depth_limit_and_ignores_modes(tmp_path):
    """The removal used where the server cannot unmount (unprivileged): 3,000 levels,
    directories of mode 000, files, symlinks pointing out (never followed)."""
    outside = tmp_path / "outside"
    outside.write_text("keep")
    top = tmp_path / "tree"
    top.mkdir()
    fd = os.open(top, os.O_RDONLY)
    for i in range(3000):
        os.mkdir("a", dir_fd=fd)
        os.symlink(str(outside), "link", dir_fd=fd)
        os.close(os.open("f", os.O_CREAT | os.O_WRONLY, 0o000, dir_fd=fd))
        sub = os.open("a", os.O_RDONLY, dir_fd=fd)
        if i % 5 == 0:
            os.fchmod(fd, 0)
        os.close(fd)
        fd = sub
    os.close(fd)
    remove_tree(str(top))
    assert not top.exists() and outside.read_text() == "keep"
    remove_tree(str(top))  # already gone: no error


@as_root
def test_quotas_fail_the_write_inside_and_say_which(work_dir_factory, sandbox_handle_cls):
    """Beyond its disk or inode quota a write fails inside the run (ENOSPC), and the
    result says which cap it reached; the cleanup of a full quota is one unmount."""
    work_dir = work_dir_factory("quota")
    with EmbeddedSandbox(work_dir=work_dir, disk_quota_mb=8, tmpfs_size_mb=4, inode_quota=300) as sb:
        h = sandbox_handle_cls(sb, work_dir)
        fill = (
            "import errno\n"
            "try:\n"
            "    with open('{path}', 'wb') as f:\n"
            "        for _ in range(64):\n"
            "            f.write(b'x' * (1 << 20))\n"
            "    print('wrote 64 MB')\n"
            "except OSError as e:\n"
            "    print('full', e.errno == errno.ENOSPC)\n"
        )
        for path, phrase in (
            ("/sandbox/big", "disk quota of /sandbox (8 MB)"),
            ("/tmp/big", "disk quota of /tmp (4 MB)"),
        ):
            r = h.run(fill.format(path=path))["run_result"]
            assert r["stdout"] == "full True\n" and f"[the run filled its {phrase}]" in r["stderr"], r
        many = (
            "import errno\n"
            "n = 0\n"
            "try:\n"
            "    while True:\n"
            "        open(f'/sandbox/f{n}', 'w').close(); n += 1\n"
            "except OSError as e:\n"
            "    print('full', e.errno == errno.ENOSPC, n < 300)\n"
        )
        r = h.run(many)["run_result"]
        assert (
            r["stdout"] == "full True True\n" and "[the run filled its file count quota of /sandbox (300" in r["stderr"]
        ), r
        r = h.run("print('fine')")["run_result"]
        assert r["stdout"] == "fine\n" and "[the run filled" not in r["stderr"], r
        h.assert_clean()
        h.http.close()


@as_root
def test_a_work_dir_the_run_user_cannot_reach_is_refused(tmp_path):
    """pytest's temp dirs are 0700 root's: a run user could not enter them."""
    from piexp.sandbox.runner import Runner

    with pytest.raises(RuntimeError, match="cannot be reached by the run user"):
        Runner.create(SandboxSettings(work_dir=str(tmp_path)))
    assert os.listdir(tmp_path) == []


@as_root
def test_run_uid_zero_is_refused():
    with pytest.raises(RuntimeError, match="never be host root"):
        RunUser.for_server(0, 0)


def _post_ignoring_the_crash(handle, code: str) -> None:
    try:
        handle.post(code)
    except Exception:  # noqa: BLE001 - the server is killed mid-request on purpose
        pass


def test_a_killed_servers_run_directories_are_removed_at_the_next_start(
    work_dir_factory, sandbox_handle_cls, wait_until
):
    """SIGKILL the server while a run writes files: its run area (tmpfs mounts
    included) stays behind, and the next server in that work dir removes it."""
    work_dir = work_dir_factory("crash")
    sb = EmbeddedSandbox(work_dir=work_dir).start()
    try:
        h = sandbox_handle_cls(sb, work_dir)
        code = "import time\nopen('left', 'w').write('x')\ntime.sleep(30)"
        threading.Thread(target=_post_ignoring_the_crash, args=(h, code), daemon=True).start()
        wait_until("the run's file", lambda: any(os.path.exists(os.path.join(d, "left")) for d in h.run_dirs()))
        sb.proc.send_signal(signal.SIGKILL)
        sb.proc.wait()
    finally:
        sb.stop()
    [area] = os.listdir(work_dir)
    assert area.startswith(AREA_PREFIX) and any(d.startswith("run-") for d in os.listdir(os.path.join(work_dir, area)))
    with EmbeddedSandbox(work_dir=work_dir) as sb2:
        assert area not in os.listdir(work_dir)
        with open("/proc/self/mountinfo") as f:
            assert os.path.join(work_dir, area) not in f.read()
        assert sandbox_handle_cls(sb2, work_dir).run("print(1)")["run_result"]["stdout"] == "1\n"
    assert os.listdir(work_dir) == []


@as_root
def test_a_run_that_fills_its_file_quota_is_cleaned_up_without_stalling_others(sandbox):
    """19,000 files (the default quota is 20,000): the run's cleanup is one unmount, and a
    request sent while it happens is answered at once (a 746,000-file cleanup once held
    every request for 12 s)."""
    code = "for i in range(19000):\n    open(f'f{i}', 'w').close()\nprint('made')\n"
    done = {}

    def many() -> None:
        r = sandbox.post(code, run_timeout=60)
        done["spans"] = dict(part.strip().split(";dur=") for part in r.headers["server-timing"].split(","))
        done["stdout"] = r.json()["run_result"]["stdout"]

    worker = threading.Thread(target=many)
    worker.start()
    pings = []
    while worker.is_alive():
        t0 = time.perf_counter()
        assert sandbox.ping()
        pings.append(time.perf_counter() - t0)
        time.sleep(0.01)
    worker.join()
    assert done["stdout"] == "made\n"
    assert float(done["spans"]["cleanup"]) < 500, done["spans"]
    assert max(pings) < 1.0, max(pings)
    sandbox.assert_clean()


def _serve_with_capabilities_dropped(dropped: str, work_dir: str, log_path: str):
    """The server as root minus `dropped` capabilities (capsh drops them from the
    bounding set before the exec), as in a container that withholds them."""
    import shutil
    import subprocess
    import sys

    from piexp.sandbox.embedded import bound_listening_socket

    if shutil.which("capsh") is None:
        pytest.skip("capsh (libcap2-bin) is not installed")
    sock = bound_listening_socket()
    command = (
        f"exec {sys.executable} -m piexp.sandbox serve --listen-fd {sock.fileno()} "
        f"--work-dir {work_dir} --die-with-parent"
    )
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            ["capsh", f"--drop={dropped}", "--", "-c", command],
            pass_fds=(sock.fileno(),),
            stdout=log,
            stderr=log,
            start_new_session=True,
        )
    port = sock.getsockname()[1]
    sock.close()
    return proc, f"http://127.0.0.1:{port}"


@as_root
def test_a_root_server_that_may_not_mount_goes_without_quotas_or_says_what_to_do(work_dir_factory, tmp_path):
    """Root without CAP_SYS_ADMIN (a container's default): no per-run tmpfs, a warning
    saying so, and runs still start as the run user; unless a runtime lies where the run
    user cannot enter (this machine's pyenv under 0700 /root): then the server refuses
    to start and says what to do."""
    import httpx

    from piexp.sandbox.isolation.layout import resolve_runtime

    work_dir = work_dir_factory("nomount")
    proc, url = _serve_with_capabilities_dropped("cap_sys_admin", work_dir, str(tmp_path / "log"))
    python = resolve_runtime("python3")
    if python is not None and python.bind_prefix and not RUN_USER.can_reach(python.bind_prefix):
        assert proc.wait(timeout=60) == 2
        log = (tmp_path / "log").read_text()
        assert "may not mount (no CAP_SYS_ADMIN)" in log and f"the runtime {python.bind_prefix} lies under" in log
        assert "Traceback" not in log and os.listdir(work_dir) == [], log
        return
    try:
        with httpx.Client(trust_env=False, timeout=60) as http:
            deadline = time.monotonic() + 30
            while True:
                try:
                    if http.get(url + "/v1/ping").status_code == 200:
                        break
                except httpx.HTTPError:
                    pass
                assert time.monotonic() < deadline and proc.poll() is None, (tmp_path / "log").read_text()
                time.sleep(0.1)
            r = http.post(url + "/run_code", json={"code": "import os\nprint(os.getuid())", "language": "python"})
            assert r.json()["run_result"]["stdout"] == "65534\n", r.text
    finally:
        proc.kill()
        proc.wait()
    log = (tmp_path / "log").read_text()
    assert "may not mount (no CAP_SYS_ADMIN)" in log and f"run uid/gid={RUN_USER.uid}" in log, log


@as_root
def test_a_root_server_that_cannot_switch_users_refuses_to_start(work_dir_factory, tmp_path):
    """Without CAP_SETUID the runs would be host root: the server says so and exits 2."""
    proc, _ = _serve_with_capabilities_dropped("cap_setuid", work_dir_factory("nosetuid"), str(tmp_path / "log"))
    assert proc.wait(timeout=60) == 2
    log = (tmp_path / "log").read_text()
    assert "without CAP_SETUID" in log and "would run them as host root" in log and "Traceback" not in log, log
