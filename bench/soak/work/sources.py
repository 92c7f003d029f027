"""An S3 source whose bucket changes while it syncs: objects added, changed and deleted before
and during each sync. The bucket is the customer's (the soak's own moto, which no fault
touches). When the load ends the pool syncs once more after its last change, as its schedule
would, and waits for that sync to finish: the bucket's final listing is what it must serve."""

from __future__ import annotations

import hashlib
import time
from typing import Any

from bench.soak.data import Documents
from bench.soak.work import Ctx, Pool
from shared import aws

BUCKET = "soak-customer-docs"
PREFIX = "handbook/"


class Sources(Pool):
    kind = "sync"
    pause_s = (8.0, 20.0)

    def __init__(self, ctx: Ctx, n: int = 0) -> None:
        super().__init__(ctx, n)
        self.docs = Documents(self.rng, ctx.texts)
        assert ctx.stack.customer is not None
        self.s3: Any = aws.client("s3", endpoint_url=ctx.stack.customer.url, region="us-east-1")
        self.source_id = ""
        self.keys: list[str] = []
        self.next_key = 0
        self.syncs: list[dict] = []   # every sync the pool saw end
        self.final: dict | None = None
        self.changes = 0
        self.changed: list[str] = []
        self.hashes: set[str] = set()  # every body put in the bucket ("sha256:<hex>")

    def setup(self) -> None:
        self.s3.create_bucket(Bucket=BUCKET)
        for _ in range(12):
            self._add()
        assert self.ctx.stack.customer is not None
        response = self.api.until_answered("POST", "/v1/sources", json={
            "bucket": BUCKET, "prefix": PREFIX, "endpoint_url": self.ctx.stack.customer.url})
        assert response is not None and response.status_code == 201, \
            response.text if response is not None else "no answer"
        self.source_id = response.json()["source_id"]

    def step(self) -> None:
        self._mutate(self.rng.randint(1, 3))
        sync_id = self._trigger()
        if sync_id is None:
            return
        self._mutate(self.rng.randint(0, 2))  # while it lists and downloads
        self._wait(sync_id, limit_s=180, until_load_over=True)

    def finish(self) -> None:
        """One sync after the last change (retrying as a scheduler would if one was still
        running or the gateway was down), waited for."""
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            sync_id = self._trigger()
            if sync_id is None:
                time.sleep(3)
                continue
            ended = self._wait(sync_id, limit_s=max(10, deadline - time.monotonic()))
            if ended is not None and ended["status"] != "failed":
                self.final = ended
                return
        self.ctx.problems.append("sources: no sync after the last change finished in 300 s")

    # ── the bucket ──────────────────────────────────────────────────────────────────────────
    def _put(self, key: str) -> None:
        body = self.docs.text().body
        self.hashes.add("sha256:" + hashlib.sha256(body).hexdigest())
        self.s3.put_object(Bucket=BUCKET, Key=key, Body=body)

    def _add(self) -> None:
        key = f"{PREFIX}doc-{self.next_key:04d}.md"
        self.next_key += 1
        self._put(key)
        self.keys.append(key)

    def _mutate(self, n: int) -> None:
        for _ in range(n):
            pick = self.rng.random()
            if pick < 0.4 or len(self.keys) < 6:
                self._add()
            elif pick < 0.75:
                # Often the key changed last time again: two runs of one document in flight,
                # which workers may finish in either order (ADR 0242).
                recent = self.changed[-3:] if self.changed and self.rng.random() < 0.5 else []
                key = self.rng.choice([k for k in recent if k in self.keys] or self.keys)
                self._put(key)
                self.changed.append(key)
            else:
                key = self.rng.choice(self.keys)
                self.s3.delete_object(Bucket=BUCKET, Key=key)
                self.keys.remove(key)
            self.changes += 1

    def listing(self) -> dict[str, bytes]:
        """The bucket's objects under the prefix, read back from the bucket itself."""
        objects = {}
        for page in self.s3.get_paginator("list_objects_v2").paginate(Bucket=BUCKET,
                                                                         Prefix=PREFIX):
            for item in page.get("Contents", []):
                body = self.s3.get_object(Bucket=BUCKET, Key=item["Key"])["Body"].read()
                objects[item["Key"]] = body
        return objects

    # ── the API ─────────────────────────────────────────────────────────────────────────────
    def _trigger(self) -> str | None:
        response = self.api.until_answered("POST", f"/v1/sources/{self.source_id}/sync",
                                           label="POST /v1/sources/{id}/sync", give_up_s=30)
        if response is None or response.status_code != 202:
            return None  # 409: one is running (maybe one whose answer we missed)
        self.ctx.journal.acknowledged(self.kind)
        return str(response.json()["sync_id"])

    def _wait(self, sync_id: str, limit_s: float, until_load_over: bool = False) -> dict | None:
        deadline = time.monotonic() + limit_s
        while time.monotonic() < deadline and not (until_load_over and self.stopped()):
            response = self.api.once("GET", f"/v1/sources/{self.source_id}/syncs/{sync_id}",
                                     label="GET /v1/sources/{id}/syncs/{id}")
            if response is not None and response.status_code == 200 \
                    and response.json()["status"] != "running":
                self.syncs.append(response.json())
                return dict(response.json())
            time.sleep(2)
        return None
