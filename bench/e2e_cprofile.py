"""Run a module under cProfile in two phases:
``python -m bench.e2e_cprofile PREFIX -m scheduler run ...``.

Like ``python -m cProfile -o FILE -m MODULE ...``, but SIGUSR1 writes what
was profiled so far to ``PREFIX.startup.prof`` and starts a fresh profile,
which is written to ``PREFIX.run.prof`` when the module exits (SIGTERM ends
troupe normally). The benchmark sends SIGUSR1 once troupe's /readyz answers,
so the start-up (initial listing, cache fill) and the scheduling run are
profiled apart. Only the main thread is profiled (troupe's event loop).

``profile_text(FILE)`` is what the benchmark prints from such a file: tottime
per package, the top entries by cumulative and by tottime (and, for the
saved .txt, who calls the top ones).
"""

from __future__ import annotations

import cProfile
import io
import os
import pstats
import re
import runpy
import signal
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    if len(sys.argv) < 4 or sys.argv[2] != "-m":
        sys.exit("usage: python -m bench.e2e_cprofile PREFIX -m MODULE [ARGS...]")
    prefix, module = sys.argv[1], sys.argv[3]
    sys.argv = [module, *sys.argv[4:]]
    state = {"prof": cProfile.Profile(), "phase": "startup"}

    def next_phase(_sig: int, _frame: object) -> None:
        if state["phase"] != "startup":
            return
        state["prof"].disable()
        state["prof"].dump_stats(f"{prefix}.startup.prof")
        state["prof"], state["phase"] = cProfile.Profile(), "run"
        state["prof"].enable()

    signal.signal(signal.SIGUSR1, next_phase)
    state["prof"].enable()
    try:
        runpy.run_module(module, run_name="__main__", alter_sys=True)
    except SystemExit:
        pass
    finally:
        state["prof"].disable()
        state["prof"].dump_stats(f"{prefix}.{state['phase']}.prof")


def _package(filename: str, func: str) -> str:
    """Where a profiled function lives: a site-packages package, troupe's subpackage, a stdlib module, or built-in."""
    if filename == "~":
        return "(idle: waiting in epoll)" if "epoll" in func else "(built-in functions)"
    parts = Path(filename).parts
    if "site-packages" in parts:
        return parts[parts.index("site-packages") + 1].split(".")[0]
    if "scheduler" in parts:
        i = len(parts) - 1 - parts[::-1].index("scheduler")
        sub = parts[i + 1] if i + 2 < len(parts) else Path(parts[-1]).stem
        return f"troupe scheduler/{sub}"
    if "bench" in parts:
        return "bench"
    stdlib = Path(os.__file__).parent
    try:
        rel = Path(filename).relative_to(stdlib)
        return f"stdlib {rel.parts[0].removesuffix('.py')}"
    except ValueError:
        return filename


def profile_text(path: Path, top: int = 25, callers: bool = False) -> str:
    """Top ``top`` by cumulative and by tottime, and tottime summed per package (and who calls the top ones)."""
    out = io.StringIO()
    st = pstats.Stats(str(path), stream=out)
    total = st.total_tt  # type: ignore[attr-defined]
    out.write(
        f"cProfile of troupe: {path}\n(total {total:.1f}s: cProfile's wall clock in the main thread, where "
        "troupe's event loop runs; time waiting for I/O is the epoll line)\n"
    )
    by_pkg: dict[str, float] = {}
    for (filename, _line, func), (_cc, _nc, tt, _ct, _callers) in st.stats.items():  # type: ignore[attr-defined]
        key = _package(filename, func)
        by_pkg[key] = by_pkg.get(key, 0.0) + tt
    out.write("\n--- tottime by package ---\n")
    for key, tt in sorted(by_pkg.items(), key=lambda kv: -kv[1])[:20]:
        out.write(f"  {tt:8.2f}s  {100 * tt / total:5.1f}%  {key}\n")
    for key in ("cumulative", "tottime"):
        out.write(f"\n--- top {top} by {key} ---\n")
        st.sort_stats(key).print_stats(top)
    if callers:
        out.write("\n--- callers of the top 12 by tottime ---\n")
        st.sort_stats("tottime").print_callers(12)
    text = out.getvalue()
    for prefix in sorted(
        {str(Path(sys.prefix) / "lib"), str(Path(os.__file__).parent) + "/", str(ROOT) + "/"}, key=len, reverse=True
    ):
        text = text.replace(prefix, "")
    return re.sub(r"\S*/site-packages/", "", re.sub(r"\S*/troupe-src/", "", text))


if __name__ == "__main__":
    main()
