"""Hostile programs. Each case asserts containment, that the server still answers, and
that no process or run directory is left behind (`assert_clean`)."""

from __future__ import annotations

import base64
import os
import threading
import time

import pytest

FAKE_SECRET = "sk-test-secret"  # planted in the server environment by conftest.py


def test_infinite_loop(sandbox, marker):
    resp = sandbox.run(f"# {marker}\nwhile True: pass", run_timeout=1)
    rr = resp["run_result"]
    assert resp["status"] == "Failed"
    assert rr["status"] == "TimeLimitExceeded" and rr["return_code"] is None
    assert rr["execution_time"] < 5
    sandbox.assert_clean()


def test_sleep_past_timeout_js(sandbox):
    resp = sandbox.run("setTimeout(() => console.log('late'), 60000)", "nodejs", run_timeout=1)
    rr = resp["run_result"]
    assert rr["status"] == "TimeLimitExceeded" and rr["return_code"] is None and "late" not in rr["stdout"]
    assert rr["execution_time"] < 5
    sandbox.assert_clean()


def test_sleep_past_timeout_with_children(sandbox, marker):
    code = f"import subprocess, time\nsubprocess.Popen(['sh', '-c', 'sleep 300 # {marker}'])\ntime.sleep(300)\n"
    resp = sandbox.run(code, run_timeout=1)
    assert resp["run_result"]["status"] == "TimeLimitExceeded"
    sandbox.assert_clean(marker)


def test_fork_bomb(sandbox, marker):
    code = f"# {marker}\nimport os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass\n"
    resp = sandbox.run(code, run_timeout=2)
    assert resp["status"] == "Failed"
    assert resp["run_result"]["execution_time"] < 10
    sandbox.assert_clean()
    # And a normal program works right after.
    assert sandbox.run("print('alive')")["run_result"]["stdout"] == "alive\n"


def test_shell_fork_bomb_js(sandbox, marker):
    code = (
        "const {spawn} = require('child_process');\n"
        f"spawn('sh', ['-c', 'f() {{ f | f & }}; f # {marker}'], {{stdio: 'ignore'}});\n"
        "setTimeout(() => {}, 60000);\n"
    )
    resp = sandbox.run(code, "nodejs", run_timeout=2)
    assert resp["run_result"]["status"] == "TimeLimitExceeded"
    sandbox.assert_clean(marker)


def _assert_memory_limit_said(memory_cgroup: bool, stderr: str, runtime_own_words: str) -> None:
    """Under a memory cgroup the kernel kills the run and the server says why; without
    one the runtime's own limit (rlimit or V8 heap flag) fails with its own message."""
    if memory_cgroup:
        assert "[killed: the run exceeded its memory limit of 256 MB]" in stderr, stderr[-500:]
    else:
        assert runtime_own_words in stderr, stderr[-500:]


def test_memory_bomb_python(sandbox, memory_cgroup):
    resp = sandbox.run("a = []\nwhile True:\n    a.append(bytearray(10**7))", run_timeout=10, memory_limit_MB=256)
    rr = resp["run_result"]
    assert resp["status"] == "Failed"
    assert rr["status"] == "Finished" and rr["return_code"] != 0, rr
    _assert_memory_limit_said(memory_cgroup, rr["stderr"], "MemoryError")
    sandbox.assert_clean()


def test_memory_bomb_node(sandbox, memory_cgroup):
    code = "const a = []; for (;;) a.push(new Array(1e6).fill(1.5));"
    resp = sandbox.run(code, "nodejs", run_timeout=15, memory_limit_MB=256)
    rr = resp["run_result"]
    assert resp["status"] == "Failed"
    assert rr["status"] == "Finished" and rr["return_code"] != 0, {**rr, "stderr": rr["stderr"][-500:]}
    _assert_memory_limit_said(memory_cgroup, rr["stderr"], "heap out of memory")
    sandbox.assert_clean()


def test_no_memory_note_for_a_run_within_its_limit(sandbox):
    resp = sandbox.run("import sys\nsys.exit(3)", memory_limit_MB=256)
    assert resp["run_result"]["return_code"] == 3
    assert "memory limit" not in resp["run_result"]["stderr"]


def test_node_gets_no_v8_flag_under_a_memory_cgroup(sandbox, memory_cgroup):
    """Any V8 flag makes node reject its built-in code cache (~6 ms a start); the cgroup
    limits memory instead, so node's command line carries none."""
    if not memory_cgroup:
        pytest.skip("no writable memory cgroup here: node gets the V8 heap flag instead")
    resp = sandbox.run("console.log(JSON.stringify(process.execArgv))", "nodejs", memory_limit_MB=256)
    assert resp["run_result"]["stdout"] == "[]\n", resp


def test_node_runs_with_default_memory_limit(sandbox):
    """The memory limit must not break node itself (RLIMIT_AS would)."""
    resp = sandbox.run("const b = Buffer.alloc(100*1024*1024, 1); console.log(b.length)", "nodejs")
    assert resp["status"] == "Success", resp
    assert resp["run_result"]["stdout"] == f"{100 * 1024 * 1024}\n"


def test_100mb_stdout_is_capped_without_stalling(sandbox):
    code = "import sys\nchunk = b'x' * (1 << 20)\nfor _ in range(100):\n    sys.stdout.buffer.write(chunk)\n"
    resp = sandbox.run(code, run_timeout=20)
    rr = resp["run_result"]
    assert resp["status"] == "Success", {**rr, "stdout": rr["stdout"][-200:]}
    assert rr["status"] == "Finished" and rr["return_code"] == 0
    assert rr["stdout"].startswith("x" * 1000)
    assert len(rr["stdout"]) < (1 << 20) + 200
    assert "truncated" in rr["stdout"][-200:]
    sandbox.assert_clean()


def test_stderr_flood(sandbox):
    code = "let s = 'e'.repeat(1 << 16); for (let i = 0; i < 800; i++) process.stderr.write(s);"
    resp = sandbox.run(code, "nodejs", run_timeout=20)
    rr = resp["run_result"]
    assert rr["status"] == "Finished" and rr["return_code"] == 0, rr["status"]
    assert len(rr["stderr"]) < (1 << 20) + 200
    sandbox.assert_clean()


def test_network_is_unreachable(sandbox):
    port = sandbox.sb.port
    code = (
        "import socket\n"
        f"for host, port in [('1.1.1.1', 53), ('127.0.0.1', {port}), ('localhost', {port})]:\n"
        "    try:\n"
        "        socket.create_connection((host, port), timeout=2).close()\n"
        "        print('CONNECTED', host)\n"
        "    except OSError as e:\n"
        "        print('blocked', host, type(e).__name__)\n"
    )
    resp = sandbox.run(code, run_timeout=10)
    out = resp["run_result"]["stdout"]
    assert "CONNECTED" not in out, out
    assert out.count("blocked") == 3, resp
    sandbox.assert_clean()


def test_host_environment_is_invisible(sandbox):
    code = (
        "import os, glob\n"
        "print(dict(os.environ))\n"
        "for p in ['/proc/1/environ', '/proc/self/environ'] + glob.glob('/proc/[0-9]*/environ'):\n"
        "    try:\n"
        "        print(p, open(p, 'rb').read())\n"
        "    except OSError as e:\n"
        "        print(p, 'denied', e)\n"
        "for p in ['/root', '/work', '/home', '/proc/1/cmdline']:\n"
        "    try:\n"
        "        print(p, os.listdir(p) if not p.startswith('/proc') else open(p,'rb').read())\n"
        "    except OSError as e:\n"
        "        print(p, 'absent', e)\n"
    )
    resp = sandbox.run(code)
    out = resp["run_result"]["stdout"]
    assert resp["status"] == "Success", resp
    assert FAKE_SECRET not in out and "TINKER_API_KEY" not in out
    assert "/proc/1/environ" in out
    assert "/work absent" in out
    js = sandbox.run(
        "console.log(JSON.stringify(process.env)); console.log(require('fs').readFileSync('/proc/1/environ','utf8'))",
        "nodejs",
    )
    assert FAKE_SECRET not in js["run_result"]["stdout"] and "TINKER_API_KEY" not in js["run_result"]["stdout"]
    sandbox.assert_clean()


def test_runs_as_unprivileged_user(sandbox):
    resp = sandbox.run("import os; print(os.getuid(), os.getgid())")
    assert resp["run_result"]["stdout"] == "65534 65534\n"


def test_runs_without_capabilities_or_new_privileges(sandbox):
    resp = sandbox.run("print(open('/proc/self/status').read())")
    status = dict(line.split(":", 1) for line in resp["run_result"]["stdout"].splitlines() if ":" in line)
    for field in ("CapInh", "CapPrm", "CapEff", "CapAmb"):
        assert int(status[field].strip(), 16) == 0, (field, status[field])
    assert status["NoNewPrivs"].strip() == "1"
    sandbox.assert_clean()


def test_writing_outside_the_run_dir(sandbox, marker):
    code = (
        "import os\n"
        f"targets = ['/usr/{marker}', '/etc/{marker}', '/bin/{marker}', '../{marker}', '/sandbox/../{marker}', "
        f"'/tmp/{marker}']\n"
        "for t in targets:\n"
        "    try:\n"
        "        open(t, 'w').write('x')\n"
        "        print('wrote', t)\n"
        "    except OSError as e:\n"
        "        print('refused', t, type(e).__name__)\n"
    )
    resp = sandbox.run(code)
    out = resp["run_result"]["stdout"]
    for target in ("/usr", "/etc", "/bin", "..", "/sandbox/.."):
        assert f"refused {target}/{marker}" in out, out
    assert f"wrote /tmp/{marker}" in out  # the private tmpfs /tmp is writable...
    # ...and private: nothing reached the host.
    for host_path in (
        f"/usr/{marker}",
        f"/etc/{marker}",
        f"/{marker}",
        f"/tmp/{marker}",
        os.path.join(os.path.dirname(sandbox.work_dir), marker),
    ):
        assert not os.path.exists(host_path), host_path
    sandbox.assert_clean()


def test_setsid_double_fork_does_not_outlive_the_run(sandbox, marker):
    code = (
        "import os, time\n"
        "if os.fork() == 0:\n"
        "    os.setsid()\n"
        "    if os.fork() == 0:\n"
        f"        os.execvp('sh', ['sh', '-c', 'sleep 300; echo {marker}'])\n"
        "    os._exit(0)\n"
        "time.sleep(0.3)\n"
        "print('parent done')\n"
    )
    resp = sandbox.run(code, run_timeout=10)
    rr = resp["run_result"]
    assert rr["status"] == "Finished" and rr["stdout"] == "parent done\n"
    assert rr["execution_time"] < 5  # the daemon did not hold the run open
    sandbox.assert_clean(marker)


def test_setsid_daemon_at_timeout(sandbox, marker):
    code = (
        "const {spawn} = require('child_process');\n"
        f"spawn('setsid', ['sh', '-c', 'sleep 300 # {marker}'], {{detached: true, stdio: 'ignore'}}).unref();\n"
        "for (;;) {}\n"
    )
    resp = sandbox.run(code, "nodejs", run_timeout=1)
    assert resp["run_result"]["status"] == "TimeLimitExceeded"
    sandbox.assert_clean(marker)


def test_huge_file_is_stopped(sandbox):
    code = (
        "chunk = b'z' * (1 << 20)\nwith open('big.bin', 'wb') as f:\n    for _ in range(200):\n        f.write(chunk)\n"
    )
    resp = sandbox.run(code, run_timeout=20, fetch_files=["big.bin"])
    rr = resp["run_result"]
    assert resp["status"] == "Failed" and rr["return_code"] != 0, rr
    # the file is capped at max_file_size_mb (16) and is also over the fetch cap? no: 16 MiB == cap
    if "big.bin" in resp["files"]:
        assert len(base64.b64decode(resp["files"]["big.bin"])) <= 16 << 20
    sandbox.assert_clean()


def test_huge_file_in_tmp(sandbox):
    code = "open('/tmp/big', 'wb').write(b'z' * (200 << 20))"
    resp = sandbox.run(code, run_timeout=20)
    assert resp["status"] == "Failed"
    sandbox.assert_clean()


def test_invalid_utf8_output(sandbox):
    resp = sandbox.run(
        "import sys; sys.stdout.buffer.write(b'ok \\xff\\xfe\\xc3 end\\n'); sys.stderr.buffer.write(b'\\x80err')"
    )
    rr = resp["run_result"]
    assert resp["status"] == "Success"
    assert rr["stdout"].startswith("ok ") and "\ufffd" in rr["stdout"] and rr["stdout"].endswith("end\n")
    assert "\ufffd" in rr["stderr"]
    sandbox.assert_clean()


def test_symlink_out_of_run_dir_is_not_fetched(sandbox):
    code = (
        "import os\n"
        "os.symlink('/etc/passwd', 'passwd_link')\n"
        "os.symlink('/', 'rootdir')\n"
        "os.symlink('/proc/self/environ', 'env_link')\n"
        "os.mkfifo('fifo')\n"
        "open('real.txt', 'w').write('real')\n"
    )
    resp = sandbox.run(code, fetch_files=["passwd_link", "rootdir/etc/passwd", "env_link", "fifo", "real.txt"])
    assert resp["status"] == "Success", resp
    assert set(resp["files"]) == {"real.txt"}
    sandbox.assert_clean()


def test_symlink_in_files_name_cannot_redirect_a_write(sandbox):
    """A file whose name goes through a directory the payload itself cannot make a link:
    plain names only; `..` anywhere is refused."""
    resp = sandbox.run("print(1)", files={"a/../../escape.txt": "x"})
    assert resp["status"] == "SandboxError" and "run_result" in resp and resp["run_result"] is None
    assert not os.path.exists(os.path.join(os.path.dirname(sandbox.work_dir), "escape.txt"))


def test_dotdot_and_absolute_file_names_are_refused(sandbox, marker):
    parent = os.path.dirname(sandbox.work_dir)
    for name in (f"../{marker}", f"/tmp/{marker}", f"sub/../../{marker}", "", ".", f"\\{marker}"):
        resp = sandbox.run("print(1)", files={name: "x"})
        assert resp["status"] == "SandboxError", (name, resp)
        assert resp["run_result"] is None
        assert "refused" in resp["message"]
    for name in (f"../{marker}", "/etc/passwd"):
        resp = sandbox.run("print(1)", fetch_files=[name])
        assert resp["status"] == "SandboxError", (name, resp)
    assert not os.path.exists(os.path.join(parent, marker))
    assert not os.path.exists(f"/tmp/{marker}")
    sandbox.assert_clean()


def test_reserved_code_file_name_is_refused(sandbox):
    resp = sandbox.run("print(1)", files={"_sandbox_main.py": "print(2)"})
    assert resp["status"] == "SandboxError"


def test_no_nested_user_namespace(sandbox):
    """A user namespace of its own would give the program every capability over its own
    mounts: both launchers refuse it (bwrap --disable-userns; the zygote's namespace has
    user.max_user_namespaces = 0)."""
    code = (
        "import ctypes, os\n"
        "libc = ctypes.CDLL(None, use_errno=True)\n"
        "for flags in (0x10000000, 0x10000000 | 0x00020000):  # CLONE_NEWUSER, + CLONE_NEWNS\n"
        "    rc = libc.unshare(flags)\n"
        "    print('unshare', hex(flags), 'ok' if rc == 0 else os.strerror(ctypes.get_errno()))\n"
    )
    resp = sandbox.run(code)
    out = resp["run_result"]["stdout"]
    assert resp["status"] == "Success" and out.count("unshare") == 2, resp
    assert " ok" not in out, out
    sandbox.assert_clean()


def test_a_run_cannot_see_another_runs_directory_or_processes(sandbox, marker):
    """Two runs at once: the second looks everywhere it can for the first one's files
    and processes (the zygote holds every run directory's parent; each run detaches it)."""
    holder = threading.Thread(
        target=sandbox.run,
        args=(f"import time\nopen('{marker}.txt', 'w').write('x')\ntime.sleep(3)  # {marker}",),
        daemon=True,
    )
    holder.start()
    deadline = time.monotonic() + 10
    while not any(os.path.exists(os.path.join(d, f"{marker}.txt")) for d in sandbox.run_dirs()):
        assert time.monotonic() < deadline, "the first run did not start"
        time.sleep(0.02)
    code = (
        "import os\n"
        "hits = []\n"
        "for top in ('/', '/proc'):\n"
        "    for root, dirs, files in os.walk(top, onerror=lambda e: None):\n"
        "        if root.startswith(('/proc/', '/sys')) or root == '/proc' and top == '/':\n"
        "            dirs[:] = []\n"
        f"        hits += [os.path.join(root, f) for f in files if '{marker}' in f]\n"
        "for pid in filter(str.isdigit, os.listdir('/proc')):\n"
        "    try:\n"
        f"        if b'{marker}' in open(f'/proc/{{pid}}/cmdline', 'rb').read(): hits.append(pid)\n"
        "    except OSError:\n"
        "        pass\n"
        "print(sorted(os.listdir('/proc')) == sorted(['1', str(os.getpid())] + [p for p in os.listdir('/proc') if not p.isdigit()]) or os.listdir('/proc'))\n"
        "print('hits', hits)\n"
    )
    resp = sandbox.run(code)
    holder.join()
    out = resp["run_result"]["stdout"]
    assert resp["status"] == "Success", resp
    assert out.splitlines() == ["True", "hits []"], out  # /proc: its init and itself only
    sandbox.assert_clean(marker)
