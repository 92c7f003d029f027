"""Who holds this worker's job slots, so one tenant's imports never take them all
(docs/decisions/0261).

A records import may run for minutes. A tenant's imports are capped across the fleet
(RECORDS_TENANT_SLOTS, docs/decisions/0097), but that cap (3) equals a worker's slots
(WORKER_MAX_CONCURRENT_JOBS, 3): on a lone worker one tenant's three imports held every other
tenant's document and import for as long as they ran. So an import does not take the last free
slot of a worker while its tenant already runs an import on that worker; it waits in the
outbox like a job over the tenant's cap, and the slot stays for whoever comes next. Documents
are never held back here: they are short, and handing each of a bulk sync's thousands of
messages back would churn the outbox.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from uuid import UUID


class SlotShare:
    def __init__(self, slots: int) -> None:
        self.slots = slots
        self._jobs = 0                          # jobs in hand, of any kind
        self._imports: Counter[UUID] = Counter()  # running imports, by tenant
        self._lock = threading.Lock()

    @contextmanager
    def job(self) -> Iterator[None]:
        """Count one job in hand for as long as the block runs."""
        with self._lock:
            self._jobs += 1
        try:
            yield
        finally:
            with self._lock:
                self._jobs -= 1

    @contextmanager
    def import_of(self, tenant_id: UUID) -> Iterator[bool]:
        """Inside ``job()``: True, counted as the tenant's import while the block runs, unless
        this job holds the worker's last slot and the tenant already runs an import here
        (then False: hand the job back). A worker of one slot admits every job."""
        with self._lock:
            last = self._jobs >= self.slots
            admitted = self.slots == 1 or not last or self._imports[tenant_id] == 0
            if admitted:
                self._imports[tenant_id] += 1
        try:
            yield admitted
        finally:
            if admitted:
                with self._lock:
                    self._imports[tenant_id] -= 1
                    if not self._imports[tenant_id]:
                        del self._imports[tenant_id]
