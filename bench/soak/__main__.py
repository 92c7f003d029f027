"""`python -m bench.soak`: see bench/soak/__init__.py."""

from __future__ import annotations

import argparse
import random
import sys
from pathlib import Path

from bench.soak.faults import KINDS
from bench.soak.run import Options, soak


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.soak",
                                     description="A chaos soak of the `make run` stack.")
    parser.add_argument("--minutes", type=float, default=30.0, help="minutes of load (30)")
    parser.add_argument("--seed", type=int, default=None,
                        help="seeds the work and the faults (default: a random one, printed)")
    parser.add_argument("--workers", type=int, default=2, help="worker processes (2)")
    parser.add_argument("--settle-s", type=float, default=600.0,
                        help="at most this long for the system to settle after the load (600)")
    parser.add_argument("--calm-s", type=float, default=60.0,
                        help="the fault-free start the figures compare against (60)")
    parser.add_argument("--out", type=Path, default=Path("test-output/soak"),
                        help="where the report, the fault log and the stack's logs go")
    parser.add_argument("--keep", action="store_true", help="keep the stack's data folder")
    parser.add_argument("--faults", default=",".join(KINDS),
                        help="the fault kinds to draw from, comma-separated (default: all)")
    args = parser.parse_args(argv)
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(10**6)
    try:
        result = soak(Options(minutes=args.minutes, seed=seed, workers=args.workers,
                              settle_s=args.settle_s, calm_s=args.calm_s, out=args.out,
                              keep=args.keep, kinds=_kinds(parser, args.faults)))
    except (RuntimeError, TimeoutError) as exc:
        print(f"the stack did not start: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted: the stack was stopped, nothing was checked", file=sys.stderr)
        return 130
    return 0 if result.ok else 1


def _kinds(parser: argparse.ArgumentParser, text: str) -> tuple[str, ...]:
    kinds = tuple(k.strip() for k in text.split(",") if k.strip())
    unknown = set(kinds) - set(KINDS)
    if unknown or not kinds:
        parser.error(f"--faults takes some of {', '.join(KINDS)}")
    return kinds


if __name__ == "__main__":
    sys.exit(main())
