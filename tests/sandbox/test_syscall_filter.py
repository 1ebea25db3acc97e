"""The sandbox's syscall filter (piexp/sandbox/syscall_filter.py), loaded by a real bwrap
with `--seccomp FD` on the run command line the bwrap launcher builds: what it refuses
(each probe is also run without the filter, to show the kernel would have allowed it),
what it lets Python and Node.js programs do, and its build (deterministic, a clear error
without libseccomp). Probes: seccomp_probes.py, run inside the sandbox."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess

import pytest

from piexp.sandbox.isolation.layout import launcher_env, resolve_runtime
from piexp.sandbox.launchers.bwrap import build_bwrap_argv, bwrap_path
from piexp.sandbox.syscall_filter import POLICY, SyscallFilterError, filter_bpf, filter_fd, syscall_number

pytestmark = [
    pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed"),
    pytest.mark.skipif(os.uname().machine != "x86_64", reason="the probes use x86_64 syscall numbers"),
]

PROBES_FILE = os.path.join(os.path.dirname(__file__), "seccomp_probes.py")

# Probes in the sandbox as the bwrap launcher builds it (uid 65534, no capabilities, no
# nested user namespaces): the filtered answer of each.
REFUSED_IN_RUN = {
    "keyctl": "EPERM",
    "add_key": "EPERM",
    "io_uring_setup": "EPERM",
    "ptrace_traceme": "EPERM",
    "ptrace_attach": "EPERM",
    "process_vm_readv": "EPERM",
    "perf_event_open": "EPERM",
    "bpf": "EPERM",
    "userfaultfd": "EPERM",
    "personality_no_randomize": "EPERM",
    "personality_bit31_no_randomize": "EPERM",
    "socket_vsock": "EPERM",
    "clone3": "ENOSYS",
    "x32_getpid": "signal:SIGSYS",
    "int80_getpid": "signal:SIGSYS",
}
# Probes a host may refuse by itself (a sysctl, or no 32-bit entry at all): for these the
# difference the filter makes is only asserted where the unfiltered call was let through.
HOST_MAY_REFUSE = {"io_uring_setup", "perf_event_open", "userfaultfd", "int80_getpid"}
# Namespaces and mounts are refused by the kernel already to a run without capabilities:
# these probes run as uid 0 with every capability inside the sandbox and without
# --disable-userns, so that only the filter stands in the way.
REFUSED_WITH_CAPABILITIES = {
    "unshare_user": "EPERM",
    "clone_newuser": "EPERM",
    "clone_newns": "EPERM",
    "clone_newpid": "EPERM",
    "clone_newnet": "EPERM",
    "mount": "EPERM",
    "fsopen": "EPERM",
    "setns": "EPERM",
}
ALLOWED = ("clone_plain", "personality_query", "personality_linux32")


def bwrap_run(tmp_path, runtime, command, *, filtered, capable=False, files=()):
    """Run `command` in a sandbox built by launchers.bwrap.build_bwrap_argv, with `--seccomp`
    when `filtered`; `files` are copied into its run directory first."""
    run_dir = tmp_path / f"run-{'f' if filtered else 'u'}{'c' if capable else ''}"
    run_dir.mkdir()
    for path in files:
        shutil.copy(path, run_dir)
    argv = build_bwrap_argv(bwrap_path(), str(run_dir), command, runtime, 64)
    if capable:
        argv.remove("--disable-userns")
        argv[argv.index("--uid") + 1] = "0"
        argv[argv.index("--gid") + 1] = "0"
        argv[1:1] = ["--cap-add", "ALL"]
    pass_fds = []
    if filtered:
        pass_fds.append(filter_fd())
        argv[argv.index("--") : argv.index("--")] = ["--seccomp", str(pass_fds[0])]
    try:
        return subprocess.run(argv, capture_output=True, text=True, pass_fds=pass_fds, env=launcher_env(), timeout=120)
    finally:
        for fd in pass_fds:
            os.close(fd)


@pytest.fixture(scope="module")
def python_runtime():
    runtime = resolve_runtime("python3")
    if runtime is None:
        pytest.skip("no python3 on PATH")
    return runtime


def probe(tmp_path, runtime, names, **kw) -> dict[str, str]:
    done = bwrap_run(tmp_path, runtime, [runtime.binary, "seccomp_probes.py", *names], files=[PROBES_FILE], **kw)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


@pytest.mark.parametrize(
    "expected,capable", [(REFUSED_IN_RUN, False), (REFUSED_WITH_CAPABILITIES, True)], ids=["run", "capable"]
)
def test_refused_syscalls_differ_from_unfiltered(tmp_path, python_runtime, expected, capable):
    names = [*expected, *ALLOWED]
    filtered = probe(tmp_path, python_runtime, names, filtered=True, capable=capable)
    unfiltered = probe(tmp_path, python_runtime, names, filtered=False, capable=capable)
    # A host that refuses one of HOST_MAY_REFUSE by itself cannot show what the filter adds.
    host_refused = {n for n in expected if n in HOST_MAY_REFUSE and unfiltered[n] != "ok"}
    checked = [n for n in expected if n not in host_refused]
    assert {n: filtered[n] for n in checked} == {n: expected[n] for n in checked}, f"under the filter: {filtered}"
    assert {n: filtered[n] for n in ALLOWED} == {n: "ok" for n in ALLOWED}
    same = {n: unfiltered[n] for n in checked if unfiltered[n] == filtered[n]}
    assert same == {}, f"refused without the filter too, so the probe shows nothing: {unfiltered}"
    assert {n: unfiltered[n] for n in ALLOWED} == {n: "ok" for n in ALLOWED}


PYTHON_PROGRAM = r"""
import json, multiprocessing, os, subprocess, sys, threading, time

def square(x):
    return x * x

if __name__ == "__main__":
    out = {}
    results = []
    threads = [threading.Thread(target=lambda i=i: results.append(i * 2)) for i in range(8)]
    [t.start() for t in threads]
    [t.join() for t in threads]
    out["threads"] = sorted(results)
    out["sh"] = subprocess.run(["/bin/sh", "-c", "echo sh-ok"], capture_output=True, text=True).stdout.strip()
    out["python"] = subprocess.run([sys.executable, "-c", "print('py-ok')"], capture_output=True, text=True).stdout.strip()
    with multiprocessing.Pool(2) as pool:
        out["pool"] = pool.map(square, range(5))
    for path in ("data.json", "/tmp/data.json"):
        with open(path, "w") as f:
            json.dump({"k": [1, 2]}, f)
        with open(path) as f:
            out[path] = json.load(f)
    start = time.monotonic()
    time.sleep(0.05)
    out["slept"] = time.monotonic() - start >= 0.05 and time.time() > 1e9
    print(json.dumps(out, sort_keys=True))
"""

NODE_PROGRAM = r"""
const fs = require("fs"), cp = require("child_process"), crypto = require("crypto");
const { Worker } = require("worker_threads");
const out = {};
fs.writeFileSync("data.txt", "hello");
out.fs = fs.readFileSync("data.txt", "utf8");
out.sh = cp.execFileSync("/bin/sh", ["-c", "echo sh-ok"]).toString().trim();
out.node = cp.spawnSync(process.execPath, ["-e", "console.log('node-ok')"]).stdout.toString().trim();
out.sha = crypto.createHash("sha256").update("piexp").digest("hex").slice(0, 16);
out.random = crypto.randomBytes(8).length;
fs.promises.readFile("data.txt", "utf8").then((text) => {
  out.promises = text;
  const worker = new Worker("require('worker_threads').parentPort.postMessage(6 * 7)", { eval: true });
  worker.on("message", (value) => {
    out.worker = value;
    const start = Date.now();
    setTimeout(() => {
      out.timer = Date.now() - start >= 40;
      console.log(JSON.stringify(out));
    }, 50);
  });
});
"""


def test_python_program_works_under_the_filter(tmp_path, python_runtime):
    (tmp_path / "program.py").write_text(PYTHON_PROGRAM)
    done = bwrap_run(
        tmp_path, python_runtime, [python_runtime.binary, "program.py"], filtered=True, files=[tmp_path / "program.py"]
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {
        "threads": [0, 2, 4, 6, 8, 10, 12, 14],
        "sh": "sh-ok",
        "python": "py-ok",
        "pool": [0, 1, 4, 9, 16],
        "data.json": {"k": [1, 2]},
        "/tmp/data.json": {"k": [1, 2]},
        "slept": True,
    }


def test_node_program_works_under_the_filter(tmp_path):
    node = resolve_runtime("node")
    if node is None:
        pytest.skip("node is not installed")
    (tmp_path / "program.js").write_text(NODE_PROGRAM)
    done = bwrap_run(tmp_path, node, [node.binary, "program.js"], filtered=True, files=[tmp_path / "program.js"])
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {
        "fs": "hello",
        "sh": "sh-ok",
        "node": "node-ok",
        "sha": hashlib.sha256(b"piexp").hexdigest()[:16],
        "random": 8,
        "promises": "hello",
        "worker": 42,
        "timer": True,
    }


def test_filter_bpf_is_deterministic_and_fd_is_read_only():
    program = filter_bpf()
    assert len(program) > 0 and len(program) % 8 == 0  # struct sock_filter records
    assert filter_bpf.__wrapped__() == program  # a fresh build, not the cache
    fd = filter_fd()
    try:
        assert os.lseek(fd, 0, os.SEEK_CUR) == 0
        assert os.read(fd, len(program) + 1) == program
        with pytest.raises(OSError):
            os.write(fd, b"x")
    finally:
        os.close(fd)


def test_every_policy_name_is_known_to_libseccomp():
    """A misspelt name would silently filter nothing: libseccomp answers -1
    (__NR_SCMP_ERROR) for a name it does not know on any architecture, and a pseudo number
    (<= -10000) for one that exists only elsewhere (vm86 on x86_64)."""
    unknown = sorted({rule.syscall for rule in POLICY if syscall_number(rule.syscall) == -1})
    assert unknown == []


def test_missing_libseccomp_is_a_clear_error():
    with pytest.raises(SyscallFilterError, match=r"libseccomp.*could not be loaded \(libseccomp-missing\.so\.9"):
        filter_bpf("libseccomp-missing.so.9")
    with pytest.raises(SyscallFilterError, match="apt-get install libseccomp2"):
        filter_fd("libseccomp-missing.so.9")
