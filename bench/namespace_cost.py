"""What fresh namespaces cost per run, against what bwrap costs for the same run.

The embedded sandbox starts one bwrap per run; bench/sandbox.py shows that this
"isolation floor" (4.5-6.5 ms of CPU for `/bin/true` on the 2-core dev VM) is what keeps
the JavaScript ratio under 0.8 once the CPUs are saturated. This probe asks how much of
that floor the namespaces themselves are: a small C program (compiled here with the
system's C compiler, into a temporary directory) forks per run, unshares the given
namespaces, maps uid 65534 (user namespace), mounts a private tmpfs /tmp (mount
namespace) and /proc (pid namespace), forks the new namespace's first process and execs
`/bin/true` — the per-run work a pre-built, long-lived sandbox root has left, since it
builds the read-only root once instead of per run. (This measurement is why the sandbox
now has that launcher: piexp/sandbox/launchers/zygote.c; bench/sandbox.py prints its floor.)

    python bench/namespace_cost.py [--runs 300]

Prints machine CPU ms and wall ms per run for: bare fork+exec, the C helper with
growing sets of namespaces, and bwrap with the embedded sandbox's full command line;
and the ratio of each to bare. Needs root (or unprivileged user namespaces), a C
compiler and bwrap; says which is missing otherwise.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile

from machine_cpu import command_cost
from record import record
from rich.console import Console
from rich.table import Table

C_SOURCE = r"""
#define _GNU_SOURCE
#include <fcntl.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/wait.h>
#include <unistd.h>

static void put(const char *path, const char *text) {
  int fd = open(path, O_WRONLY);
  if (fd < 0 || write(fd, text, strlen(text)) < 0) { perror(path); _exit(99); }
  close(fd);
}

int main(int argc, char **argv) {
  int runs = atoi(argv[1]), flags = atoi(argv[2]);
  for (int i = 0; i < runs; i++) {
    pid_t outer = fork();
    if (outer == 0) {
      uid_t uid = getuid(); gid_t gid = getgid();
      if (flags && unshare(flags) < 0) { perror("unshare"); _exit(98); }
      if (flags & CLONE_NEWUSER) {
        char line[64];
        put("/proc/self/setgroups", "deny");
        snprintf(line, sizeof line, "65534 %d 1", uid); put("/proc/self/uid_map", line);
        snprintf(line, sizeof line, "65534 %d 1", gid); put("/proc/self/gid_map", line);
      }
      if (flags & CLONE_NEWNS) {
        mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL);
        if (mount("tmpfs", "/tmp", "tmpfs", MS_NOSUID | MS_NODEV, "size=1m") < 0) { perror("tmpfs"); _exit(97); }
      }
      pid_t first = fork();  /* pid 1 of a new pid namespace */
      if (first == 0) {
        if ((flags & CLONE_NEWPID) && (flags & CLONE_NEWNS))
          mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL);
        execl("/bin/true", "true", (char *)0);
        _exit(96);
      }
      int status;
      waitpid(first, &status, 0);
      _exit(WIFEXITED(status) ? WEXITSTATUS(status) : 95);
    }
    int status;
    waitpid(outer, &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status)) { fprintf(stderr, "run %d failed (%d)\n", i, status); return 1; }
  }
  return 0;
}
"""

CLONE = {
    "user": 0x10000000,
    "mount": 0x00020000,
    "pid": 0x20000000,
    "ipc": 0x08000000,
    "cgroup": 0x02000000,
    "uts": 0x04000000,
    "net": 0x40000000,
}
VARIANTS = [
    ("C helper, no namespaces (bare fork+exec)", ()),
    ("C helper: user, mount, pid", ("user", "mount", "pid")),
    ("C helper: + ipc, cgroup", ("user", "mount", "pid", "ipc", "cgroup")),
    ("C helper: + uts, net (all of bwrap's)", ("user", "mount", "pid", "ipc", "cgroup", "uts", "net")),
]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--runs", type=int, default=300)
    args = p.parse_args()
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        print("no C compiler (cc/gcc) on PATH: this probe compiles its helper", file=sys.stderr)
        return 2
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    from piexp.sandbox.isolation.layout import resolve_runtime
    from piexp.sandbox.launchers.bwrap import build_bwrap_argv, bwrap_path

    bwrap, runtime = bwrap_path(), resolve_runtime("python3")
    with tempfile.TemporaryDirectory(prefix="ns-cost-") as tmp:
        src, exe = os.path.join(tmp, "ns_cost.c"), os.path.join(tmp, "ns_cost")
        with open(src, "w") as f:
            f.write(C_SOURCE)
        subprocess.run([cc, "-O2", "-o", exe, src], check=True)
        rows = []
        for label, names in VARIANTS:
            flags = sum(CLONE[n] for n in names)
            try:
                rows.append((label, *command_cost([exe, str(args.runs), str(flags)], args.runs, args.runs)))
            except subprocess.CalledProcessError:
                rows.append((label, float("nan"), float("nan")))
        if bwrap is not None and runtime is not None:
            run_dir = os.path.join(tmp, "run")
            os.mkdir(run_dir, 0o755)
            argv = build_bwrap_argv(bwrap, run_dir, ["/bin/true"], runtime, 16)
            rows.append(("bwrap, the embedded sandbox's command line", *command_cost(argv, max(50, args.runs // 3))))
            rows.append(
                (
                    "/bin/true spawned from Python (bwrap's baseline)",
                    *command_cost(["/bin/true"], max(50, args.runs // 3)),
                )
            )
    base_cpu = rows[0][1]
    table = Table(title=f"per-run cost of isolation for /bin/true ({os.cpu_count()} CPUs, {args.runs} runs)")
    for col in ("what runs", "CPU ms/run", "wall ms/run", "CPU vs bare fork+exec"):
        table.add_column(col, justify="right" if col != "what runs" else "left")
    for label, cpu, wall in rows:
        table.add_row(label, f"{cpu:.2f}", f"{wall:.2f}", f"{cpu / base_cpu:.1f}x")
    Console(width=max(120, Console().width)).print(table)
    record(__file__, [table])
    return 0


if __name__ == "__main__":
    sys.exit(main())
