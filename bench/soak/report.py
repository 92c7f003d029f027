"""The figures: throughput per kind of work and latency per endpoint in the fault-free first
minute beside the minutes with faults, so that degradation under faults is a number; and what
the system finished per minute (from the database: runs, batches, ledger events)."""

from __future__ import annotations

import statistics
from collections import Counter, defaultdict
from collections.abc import Iterable
from typing import Any

from bench.soak.faults import Fault
from bench.soak.journal import Call


def _p95(values: list[float]) -> float | None:
    if len(values) < 2:
        return values[0] if values else None
    return statistics.quantiles(values, n=20, method="inclusive")[18]


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value * 1000:.0f}"


def throughput(done: list[tuple[str, float]], calm_s: float, end_s: float) -> list[str]:
    calm = Counter(kind for kind, at in done if at < calm_s)
    rest = Counter(kind for kind, at in done if calm_s <= at <= end_s)
    rest_min = max(1e-9, (end_s - calm_s) / 60)
    lines = [f"  {'kind of work':<16} {'first min /min':>15} {'with faults /min':>17}"]
    for kind in sorted(set(calm) | set(rest)):
        lines.append(f"  {kind:<16} {calm[kind] / (calm_s / 60):>15.1f} "
                     f"{rest[kind] / rest_min:>17.1f}")
    return lines


def latency(calls: list[Call], calm_s: float, end_s: float) -> list[str]:
    groups: dict[str, dict[str, list[Call]]] = defaultdict(lambda: {"calm": [], "rest": []})
    for c in calls:
        if c.at_s > end_s:
            continue
        groups[c.endpoint]["calm" if c.at_s < calm_s else "rest"].append(c)
    lines = [f"  {'endpoint':<40} {'n':>6} {'p95 ms':>8} {'fail':>5} │ {'n':>6} {'p95 ms':>8}"
             f" {'fail':>5}  (first minute │ with faults; fail = no answer or 5xx)"]
    for endpoint in sorted(groups):
        cells = []
        for part in ("calm", "rest"):
            got = groups[endpoint][part]
            ok = [c.latency_s for c in got if c.status is not None and c.status < 500]
            failed = sum(1 for c in got if c.status is None or c.status >= 500)
            cells.append(f"{len(got):>6} {_ms(_p95(ok)):>8} {failed:>5}")
        lines.append(f"  {endpoint:<40} {cells[0]} │ {cells[1]}")
    return lines


def finished(rows: Iterable[dict[str, Any]], calm_s: float, end_s: float) -> list[str]:
    """rows: (kind, at_s) of work the system finished, from the database."""
    return throughput([(r["kind"], float(r["at_s"])) for r in rows], calm_s, end_s)


def faults_summary(faults: list[Fault]) -> list[str]:
    done = [f for f in faults if not f.detail.startswith("not injected")]
    counts = Counter(f.kind for f in done)
    skipped = [f for f in faults if f.detail.startswith("not injected")]
    lines = [f"  {'kind':<14} {'n':>3}  whole again after (s): median, max"]
    for kind, n in sorted(counts.items()):
        back = [f.recovered_s for f in done if f.kind == kind and f.recovered_s is not None]
        shown = f"{statistics.median(back):.0f}, {max(back):.0f}" if back else "-"
        lines.append(f"  {kind:<14} {n:>3}  {shown}")
    lines.append(f"  {'total':<14} {sum(counts.values()):>3}")
    lines += [f"  (fault {f.n} {f.kind}: {f.detail})" for f in skipped]
    return lines
