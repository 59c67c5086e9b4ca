"""`python -m bench [BENCHMARK] [options]`: BENCHMARK is `core` (the default,
so `make bench BENCH_ARGS=--quick` works); `python -m bench core --help`."""

from __future__ import annotations

import importlib
import sys

BENCHMARKS = {
    "core": "bench.core",
    "e2e": "bench.e2e",
    "status-write": "bench.status_write",
    "starvation": "bench.starvation",
    "autoscale": "bench.autoscale",
    "resize": "bench.resize",
}
DEFAULT = "core"


def main(argv: list[str]) -> int:
    if argv and argv[0] in ("-h", "--help"):
        print(
            f"usage: python -m bench [{'|'.join(BENCHMARKS)}] [options]   (default: {DEFAULT}; "
            f"options: python -m bench {DEFAULT} --help)"
        )
        return 0
    if not argv or argv[0].startswith("-"):
        argv = [DEFAULT, *argv]
    if argv[0] not in BENCHMARKS:
        print(f"python -m bench: unknown benchmark {argv[0]!r} (known: {', '.join(BENCHMARKS)})", file=sys.stderr)
        return 2
    return int(importlib.import_module(BENCHMARKS[argv[0]]).main(argv[1:]))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
