"""Records and ad-metrics imports: judgments, plaintiffs and platform exports, some over the
error budget, some the very bytes of an earlier file again (answered 200 with that batch)."""

from __future__ import annotations

from dataclasses import dataclass

from bench.soak.data import Records, RecordsFile
from bench.soak.work import Ctx, Pool


@dataclass
class Import:
    file: RecordsFile
    status: int | None  # 202 new batch, 200 duplicate of an earlier one, 4xx refused, None
    batch_id: str | None = None
    run_id: str | None = None
    duplicate: bool = False


class Imports(Pool):
    kind = "import"
    pause_s = (3.0, 8.0)

    def __init__(self, ctx: Ctx, n: int = 0) -> None:
        super().__init__(ctx, n)
        self.records = Records(self.rng)
        self.sent: list[Import] = []

    def step(self) -> None:
        earlier = [s for s in self.sent if s.status in (200, 202)]
        if earlier and self.rng.random() < 0.15:
            file = self.rng.choice(earlier).file  # the same file again
        else:
            file = self.records.next(over_budget=self.rng.random() < 0.15)
        fields = {"contract": file.contract}
        if file.platform:
            fields["platform"] = file.platform
        response = self.api.until_answered("POST", "/v1/imports", data=fields,
                                           files={"file": (file.name, file.body)})
        sent = Import(file, response.status_code if response is not None else None)
        if response is not None and response.status_code in (200, 202):
            body = response.json()
            sent.batch_id, sent.run_id = body["batch_id"], body.get("run_id")
            sent.duplicate = bool(body.get("duplicate"))
            self.ctx.journal.acknowledged(self.kind)
        self.sent.append(sent)
