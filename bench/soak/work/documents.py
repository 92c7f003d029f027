"""Document uploads (text, PDF, DOCX, files that can never be processed, the same bytes again)
and new versions of a few documents by `doc_id`, each version after the last one's run ended."""

from __future__ import annotations

import hashlib
import time
from dataclasses import dataclass

from bench.soak.data import Doc, Documents
from bench.soak.work import Ctx, Pool

FINAL = ("succeeded", "failed")


@dataclass
class Upload:
    doc: Doc
    sha256: str
    status: int | None       # the final answer: 202 queued, 200 skipped, 4xx refused, None
    run_id: str | None = None
    doc_id: str | None = None
    reason: str | None = None  # 200 skipped: why
    version_of: int | None = None  # the versions pool's document number
    version: int = 0
    run_status: str | None = None  # what the versions pool saw the run end as


def sha256(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


class Uploads(Pool):
    kind = "upload"
    pause_s = (1.5, 4.0)

    def __init__(self, ctx: Ctx, n: int = 0) -> None:
        super().__init__(ctx, n)
        self.docs = Documents(self.rng, ctx.texts)
        self.sent: list[Upload] = []

    def step(self) -> None:
        pick = self.rng.random()
        earlier = [u for u in self.sent if u.doc.good and u.status in (200, 202)]
        if pick < 0.15 and earlier:
            doc = self.rng.choice(earlier).doc  # the same bytes again: one document
        elif pick < 0.25:
            doc = self.docs.bad()
        elif pick < 0.45:
            doc = self.docs.pdf()
        elif pick < 0.65:
            doc = self.docs.docx()
        else:
            doc = self.docs.text()
        self.sent.append(upload(self, doc))


def upload(pool: Pool, doc: Doc, doc_id: str | None = None) -> Upload:
    data = {"doc_id": doc_id} if doc_id else None
    response = pool.api.until_answered("POST", "/v1/ingest", files={"file": (doc.name, doc.body)},
                                       data=data)
    sent = Upload(doc, sha256(doc.body), response.status_code if response else None)
    if response is not None and response.status_code in (200, 202):
        body = response.json()
        sent.run_id, sent.doc_id = body.get("run_id"), body.get("doc_id")
        sent.reason = body.get("reason")
        pool.ctx.journal.acknowledged(pool.kind)
    return sent


class Versions(Pool):
    """A few documents, each given a new version by `doc_id` once its last run has ended."""

    kind = "version"
    pause_s = (2.0, 6.0)
    DOCUMENTS = 3

    def __init__(self, ctx: Ctx, n: int = 0) -> None:
        super().__init__(ctx, n)
        self.docs = Documents(self.rng, ctx.texts)
        self.doc_ids: dict[int, str] = {}
        self.versions: dict[int, int] = {}
        self.sent: list[Upload] = []
        self.uncertain: set[int] = set()  # a version got no answer: it may or may not exist

    def step(self) -> None:
        no = self.rng.randrange(self.DOCUMENTS)
        if no in self.uncertain:
            return
        version = self.versions.get(no, 0) + 1
        sent = upload(self, self.docs.versioned(no, version), self.doc_ids.get(no))
        sent.version_of, sent.version = no, version
        self.sent.append(sent)
        if sent.status is None or (sent.status == 202 and not sent.run_id):
            self.uncertain.add(no)
            return
        if sent.status not in (200, 202):
            return
        self.versions[no] = version
        self.doc_ids.setdefault(no, str(sent.doc_id))
        # A retry of an old version would reorder them: the ops pool leaves these alone.
        self.ctx.versioned_docs.add(str(sent.doc_id))
        if sent.run_id:  # the next version only once this one's run ended
            sent.run_status = self._wait(sent.run_id)

    def _wait(self, run_id: str, limit_s: float = 240) -> str | None:
        deadline = time.monotonic() + limit_s
        while time.monotonic() < deadline and not self.stopped():
            response = self.api.once("GET", f"/v1/ingestion-runs/{run_id}",
                                     label="GET /v1/ingestion-runs/{id}")
            if response is not None and response.status_code == 200 \
                    and response.json()["status"] in FINAL:
                return str(response.json()["status"])
            time.sleep(2)
        return None
