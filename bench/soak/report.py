"""The figures: throughput per kind of work and latency per endpoint in the fault-free first
minute beside the minutes with faults, so that degradation under faults is a number; what the
system finished per minute (from the database: runs, batches, ledger events); and, per fault
kind, how long until the clients were served again and how many of their requests succeeded
meanwhile (with the retries a client does), measured from the clients' side."""

from __future__ import annotations

import math
import statistics
from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from bench.soak.faults import Fault
from bench.soak.journal import Call, Outcome, failed

# A fault's window for the clients' view: until the next fault, at most this long.
WINDOW_MAX_S = 120.0
# The targets (issue 36), printed beside what the run measured.
GATEWAY_KILL_SUCCESS = 0.99
POSTGRES_RECOVERY_S = 20.0


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


@dataclass(frozen=True)
class Recovery:
    """One fault as the clients saw it."""

    fault: Fault
    failed_attempts: int
    # From the fault's start to the end of the first attempt served after the last one that
    # failed in its window; 0 when none failed; None when none was served again in the window.
    served_again_s: float | None
    requests: int     # client requests (with their retries) started in the window
    succeeded: int


def client_recovery(faults: list[Fault], calls: list[Call], outcomes: list[Outcome],
                    load_end_s: float) -> list[Recovery]:
    done = sorted((f for f in faults if not f.detail.startswith("not injected")),
                  key=lambda f: f.started_s)
    out = []
    for i, fault in enumerate(done):
        end = min(load_end_s, fault.started_s + WINDOW_MAX_S,
                  done[i + 1].started_s if i + 1 < len(done) else math.inf)
        inside = [c for c in calls if fault.started_s <= c.at_s < end]
        failures = [c for c in inside if failed(c.status)]
        served_again: float | None = 0.0
        if failures:
            last = max(c.at_s for c in failures)
            # The first success may come after the window (the next fault began meanwhile):
            # the clients were not served again before it, so look on, to the load's end (what
            # the settling and the checker ask afterwards is not a client being served).
            after = [c.at_s + c.latency_s for c in calls
                     if last < c.at_s < load_end_s and not failed(c.status)]
            served_again = round(min(after) - fault.started_s, 1) if after else None
        requests = [o for o in outcomes if fault.started_s <= o.started_s < end]
        out.append(Recovery(fault, len(failures), served_again, len(requests),
                            sum(1 for o in requests if o.ok)))
    return out


def faults_summary(faults: list[Fault], recoveries: list[Recovery] | None = None) -> list[str]:
    done = [f for f in faults if not f.detail.startswith("not injected")]
    counts = Counter(f.kind for f in done)
    skipped = [f for f in faults if f.detail.startswith("not injected")]
    by_kind: dict[str, list[Recovery]] = defaultdict(list)
    for r in recoveries or []:
        by_kind[r.fault.kind].append(r)
    lines = [f"  {'kind':<14} {'n':>3}  {'clients served again (s)':>25}  {'requests ok':>12}  "
             f"{'processes ready again (s)':>26}",
             f"  {'':<14} {'':>3}  {'median, max':>25}  {'(retried)':>12}  {'median, max':>26}"]
    for kind, n in sorted(counts.items()):
        back = [f.recovered_s for f in done if f.kind == kind and f.recovered_s is not None]
        ready = f"{statistics.median(back):.0f}, {max(back):.0f}" if back else "-"
        lines.append(f"  {kind:<14} {n:>3}  {_served(by_kind[kind]):>25}  "
                     f"{_share(by_kind[kind]):>12}  {ready:>26}")
    lines.append(f"  {'total':<14} {sum(counts.values()):>3}")
    lines += [f"  (fault {f.n} {f.kind}: {f.detail})" for f in skipped]
    return lines


def _served(recoveries: list[Recovery]) -> str:
    if not recoveries:
        return "-"
    values = [r.served_again_s for r in recoveries]
    known = [v for v in values if v is not None]
    never = len(values) - len(known)
    text = f"{statistics.median(known):.1f}, {max(known):.1f}" if known else "-"
    return text + (f" ({never} never)" if never else "")


def _share(recoveries: list[Recovery]) -> str:
    total = sum(r.requests for r in recoveries)
    ok = sum(r.succeeded for r in recoveries)
    return f"{100 * ok / total:.1f} %" if total else "-"


def targets(recoveries: list[Recovery]) -> list[str]:
    """The issue's targets, each with what this run measured (met or missed)."""
    kills = [r for r in recoveries if r.fault.kind == "kill_gateway"]
    total, ok = sum(r.requests for r in kills), sum(r.succeeded for r in kills)
    lines = []
    if total:
        share = ok / total
        mark = "met" if share >= GATEWAY_KILL_SUCCESS else "MISSED"
        lines.append(f"  {mark}: client requests during gateway kills that succeeded (with "
                     f"retries): {100 * share:.1f} % of {total} (target >= "
                     f"{100 * GATEWAY_KILL_SUCCESS:.0f} %)")
    pg = [r.served_again_s for r in recoveries if r.fault.kind == "kill_postgres"]
    if pg:
        worst = None if any(v is None for v in pg) else max(v for v in pg if v is not None)
        mark = "met" if worst is not None and worst <= POSTGRES_RECOVERY_S else "MISSED"
        shown = "never" if worst is None else f"{worst:.1f} s"
        lines.append(f"  {mark}: clients served again after a Postgres kill: at most {shown} "
                     f"over {len(pg)} kill(s) (target <= {POSTGRES_RECOVERY_S:.0f} s)")
    return lines or ["  (no gateway or Postgres kill in this run)"]
