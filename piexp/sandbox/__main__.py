"""`python -m piexp.sandbox serve --port N`: run the sandbox server on its own;
`python -m piexp.sandbox build-zygote`: compile the zygote launcher (set-up does)."""

from __future__ import annotations

import argparse
import logging
import os
import sys

from .isolation import set_parent_death_signal
from .request_limits import SERVER_LIMIT_SETTINGS
from .settings import LAUNCHERS, SandboxSettings


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m piexp.sandbox")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("serve", help="serve SandboxFusion's /run_code")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8080)
    p.add_argument("--listen-fd", type=int, default=None,
                   help="serve on this inherited, bound and listening socket (ignores --host/--port)")
    d = SandboxSettings()
    p.add_argument("--max-concurrency", type=int, default=d.max_concurrency)
    p.add_argument("--default-memory-limit-mb", type=int, default=d.default_memory_limit_mb)
    p.add_argument("--output-cap-bytes", type=int, default=d.output_cap_bytes)
    p.add_argument("--cpu-time-s", type=float, default=d.cpu_time_s)
    p.add_argument("--max-processes", type=int, default=d.max_processes)
    p.add_argument("--max-file-size-mb", type=int, default=d.max_file_size_mb)
    p.add_argument("--max-open-files", type=int, default=d.max_open_files)
    p.add_argument("--work-dir", default=d.work_dir)
    p.add_argument("--prespawn", type=int, default=d.prespawn,
                   help="sandboxes per language started ahead of requests (0: none)")
    p.add_argument("--launcher", choices=LAUNCHERS, default=d.launcher,
                   help="zygote: one process holds the sandbox root and starts every run (default); bwrap: one per run")
    p.add_argument("--no-cgroups", action="store_true", help="limit memory/processes with rlimits only")
    p.add_argument("--allow-unisolated", action="store_true", help="run without bubblewrap (unsafe)")
    p.add_argument("--die-with-parent", action="store_true", help="exit when the parent process dies")
    for name in SERVER_LIMIT_SETTINGS:  # caps on clients, see SandboxSettings' comments
        default = getattr(d, name)
        p.add_argument("--" + name.replace("_", "-"), type=type(default), default=default)
    sub.add_parser("build-zygote", help="compile the sandbox's zygote launcher (cached; prints its path)")
    args = parser.parse_args(argv)
    if args.command == "build-zygote":
        from .zygote import ZygoteError, zygote_binary

        try:
            print(zygote_binary())
        except ZygoteError as exc:
            print(f"piexp sandbox: {exc}; runs will start with a bwrap each", file=sys.stderr)
            return 1
        return 0

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if args.die_with_parent:
        set_parent_death_signal()
        if os.getppid() == 1:  # the parent already died before prctl took effect
            return 1
    from .server import serve

    settings = SandboxSettings(
        max_concurrency=args.max_concurrency,
        default_memory_limit_mb=args.default_memory_limit_mb,
        output_cap_bytes=args.output_cap_bytes,
        cpu_time_s=args.cpu_time_s,
        max_processes=args.max_processes,
        max_file_size_mb=args.max_file_size_mb,
        max_open_files=args.max_open_files,
        allow_unisolated=args.allow_unisolated,
        use_cgroups=not args.no_cgroups,
        work_dir=args.work_dir,
        prespawn=args.prespawn,
        launcher=args.launcher,
        **{name: getattr(args, name) for name in SERVER_LIMIT_SETTINGS},
    )
    try:
        serve(args.host, args.port, settings, listen_fd=args.listen_fd)
    except RuntimeError as exc:
        print(f"piexp sandbox: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
