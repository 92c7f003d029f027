"""5. Nobody had to act for the system to settle, and every process is up at the end."""

from __future__ import annotations

from bench.soak.checks.world import Verdict, World, verdict


def check(world: World) -> list[Verdict]:
    late = [a for a in world.admin.actions if a.at_s > world.load_end_s]
    problems = [f"{a.what} {a.target} at {a.at_s:.0f}s, after the load" for a in late]
    if world.settle_actions:
        problems.append(f"the settling took {world.settle_actions} actions")
    actions = world.sql("SELECT actor, reason, count(*) AS n FROM run_actions WHERE tenant_id = "
                        "%s GROUP BY actor, reason", (world.tenant_id,))
    problems += [f"{r['n']} run action(s) by {r['actor']}: {r['reason']}" for r in actions
                 if not r["reason"].startswith("soak: the admin's")]
    during = len(world.admin.actions)
    out = [verdict("5a", "operator actions needed to settle (must be 0)", len(late), problems,
                   f"the admin's routine redrove/retried {during} times during the load")]
    down = [f"{name} is not running" for name, pid in world.children.items() if not pid]
    expected = {"moto", "postgres", "gateway", *(f"worker-{i + 1}" for i in range(world.workers))}
    down += [f"{name} is not supervised" for name in sorted(expected - set(world.children))]
    if not world.ready:
        down.append("/health/ready is not 200")
    out.append(verdict("5b", "processes up at the end", sum(1 for p in world.children.values()
                                                            if p), down))
    return out
