"""`python -m piexp.sandbox serve --port N`: run the sandbox server on its own;
`python -m piexp.sandbox build-zygote`: compile the zygote launcher (set-up does)."""

from __future__ import annotations

import argparse
import logging
import os
import sys

from .isolation.process import set_parent_death_signal
from .settings import add_settings_flags, settings_from_flags


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m piexp.sandbox")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("serve", help="serve SandboxFusion's /run_code")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8080)
    p.add_argument(
        "--listen-fd",
        type=int,
        default=None,
        help="serve on this inherited, bound and listening socket (ignores --host/--port)",
    )
    add_settings_flags(p)
    p.add_argument("--die-with-parent", action="store_true", help="exit when the parent process dies")
    sub.add_parser("build-zygote", help="compile the sandbox's zygote launcher (cached; prints its path)")
    args = parser.parse_args(argv)
    if args.command == "build-zygote":
        from .launchers.zygote_client import ZygoteError, zygote_binary

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

    settings = settings_from_flags(args)
    try:
        serve(args.host, args.port, settings, listen_fd=args.listen_fd)
    except RuntimeError as exc:
        print(f"piexp sandbox: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
