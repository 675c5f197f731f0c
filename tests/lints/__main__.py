"""`python -m tests.lints [NAME ...]`: run the static lints (all, or those named); exit 1 on a
problem, each on a line of its own naming the file to fix."""

from __future__ import annotations

import argparse
import sys

from tests.lints import LINTS, Tree, run


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.lints", description=__doc__)
    parser.add_argument("names", nargs="*", metavar="NAME", help="lints to run (default: all)")
    parser.add_argument("--list", action="store_true", help="name every lint and stop")
    args = parser.parse_args(argv)
    if args.list:
        for name, lint in LINTS.items():
            print(f"{name}: {(lint.__doc__ or '').splitlines()[0]}")
        return 0
    unknown = [name for name in args.names if name not in LINTS]
    if unknown:
        parser.error(f"no lint named {', '.join(unknown)} (one of: {', '.join(LINTS)})")
    chosen = {name: LINTS[name] for name in args.names or LINTS}
    return run(chosen, Tree(), sys.stdout)


if __name__ == "__main__":
    sys.exit(main())
