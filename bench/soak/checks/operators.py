"""5. Nobody had to act for the system to settle, and every process is up at the end.

``gather`` reads; ``judge`` decides from what was gathered (tests/unit/test_soak_checks.py).
The actions are the database's own record of them (run actions, event actions and replays),
not a count the soak keeps: whoever acted after the load ended, it shows."""

from __future__ import annotations

from dataclasses import dataclass

from bench.soak.checks.world import Verdict, World, verdict

ADMIN_REASON = "soak: the admin's"
ACTIONS = """
SELECT 'run ' || action AS what, actor, reason, created_at FROM run_actions WHERE tenant_id = %(t)s
UNION ALL
SELECT 'event ' || action, actor, reason, created_at FROM event_actions WHERE tenant_id = %(t)s
UNION ALL
SELECT 'event replay', actor, 'replayed ' || event_count || ' event(s)', created_at
  FROM event_replays WHERE tenant_id = %(t)s
"""


@dataclass
class Facts:
    actions: list[dict]        # every recorded operator action: what, actor, reason, created_at
    load_end_at: float         # wall clock (epoch seconds) when the load ended
    admin_actions: int         # what the soak's admin routine did during the load
    children: dict[str, int | None]  # supervised child → pid while alive, None if not
    expected: set[str]         # the children `ingest dev` must supervise
    ready: bool


def gather(world: World) -> Facts:
    expected = {"moto", "postgres", *(f"gateway-{i + 1}" for i in range(world.gateways)),
                *(f"worker-{i + 1}" for i in range(world.workers))}
    return Facts(world.sql(ACTIONS, {"t": world.tenant_id}), world.load_end_at,
                 len(world.admin.actions), dict(world.children), expected, world.ready)


def judge(facts: Facts) -> list[Verdict]:
    late = [a for a in facts.actions if a["created_at"].timestamp() > facts.load_end_at]
    problems = [f"{a['what']} by {a['actor']} after the load: {a['reason']}" for a in late]
    problems += [f"{a['what']} by {a['actor']}: {a['reason']}" for a in facts.actions
                 if a not in late and not str(a["reason"]).startswith(ADMIN_REASON)]
    out = [verdict("5a", "operator actions recorded while the system settled (must be 0)",
                   len(late), problems, f"the admin's routine redrove/retried "
                   f"{facts.admin_actions} times during the load")]
    down = [f"{name} is not running" for name, pid in facts.children.items() if not pid]
    down += [f"{name} is not supervised" for name in sorted(facts.expected - set(facts.children))]
    if not facts.ready:
        down.append("/health/ready is not 200")
    out.append(verdict("5b", "processes up at the end",
                       sum(1 for p in facts.children.values() if p), down))
    return out
