"""`python -m piexp.harness.pi install | where`: install Pi (scripts/setup.sh runs it),
or print where the pinned version is installed."""

from __future__ import annotations

import argparse
import sys
import time

from piexp.harness.pi.install import find_install, install, locked_versions


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m piexp.harness.pi", description=__doc__)
    parser.add_argument("command", choices=("install", "where"))
    args = parser.parse_args(argv)
    versions = locked_versions()
    if args.command == "where":
        found = find_install(versions["pi"])
        if found is None:
            print(f"Pi {versions['pi']} is not installed (run make setup)", file=sys.stderr)
            return 1
        print(found.prefix)
        return 0
    started = time.perf_counter()
    already = find_install(versions["pi"]) is not None
    found = install()
    took = "" if already else f" in {time.perf_counter() - started:.1f} s"
    print(f"Pi {found.pi_version} with node {found.node_version}: {found.prefix}{took}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
