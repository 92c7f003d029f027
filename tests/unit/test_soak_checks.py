"""Every invariant of the chaos soak can fail (issue 36): each check's judgement is handed a
healthy world, which passes, and then, one at a time, a world broken the way that invariant
guards against, which must fail that invariant (bench/soak/checks).

The worlds are small and made here: what the clients sent and were told, and the rows the
store would hold. No database, no stack: the gathering is the soak's own run's to exercise."""

from __future__ import annotations

import copy
import hashlib
import json
from collections.abc import Callable
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

import pytest

from bench.soak import report
from bench.soak.checks import documents, events, imports, logs, operators, sources
from bench.soak.data import Doc, Event, RecordsFile
from bench.soak.faults import Fault
from bench.soak.journal import Call, Outcome
from bench.soak.work.documents import Upload
from bench.soak.work.events import Sent
from bench.soak.work.hooks import Received
from bench.soak.work.records import Import

H = "sha256:" + "a" * 64
H2 = "sha256:" + "b" * 64
BAD = "sha256:" + "c" * 64
V1, V2 = "sha256:" + "1" * 64, "sha256:" + "2" * 64
LOAD_END = 1_000_000.0


# ── healthy worlds ──────────────────────────────────────────────────────────────────────────
def _documents() -> documents.Facts:
    good = Upload(Doc("a.md", b"a", "m1", True), H, 202, run_id="r1", doc_id="d1")
    again = Upload(Doc("a.md", b"a", "m1", True), H, 200, doc_id="d1", reason="already")
    bad = Upload(Doc("x.pdf", b"x", "m2", False), BAD, 202, run_id="r2", doc_id="d2")
    v1 = Upload(Doc("h1.md", b"1", "mv1", True), V1, 202, run_id="r3", doc_id="d3",
                version_of=0, version=1)
    v2 = Upload(Doc("h2.md", b"2", "mv2", True), V2, 202, run_id="r4", doc_id="d3",
                version_of=0, version=2)
    runs = {"r1": {"status": "succeeded"},
            "r2": {"status": "failed", "error": "no text", "retryable": False},
            "r3": {"status": "succeeded"}, "r4": {"status": "succeeded"}}

    def version(vid: str, doc: str, digest: str, active: bool, run: str | None = "succeeded",
                chunks: int = 2) -> dict[str, Any]:
        return {"doc_version_id": vid, "doc_id": doc, "source_id": None, "content_hash": digest,
                "is_active": active, "run_status": run, "chunk_count": chunks, "chunks": chunks,
                "vectors": chunks, "texts": chunks}

    return documents.Facts(
        acked=[good, again, bad, v1, v2], runs=runs,
        failed_runs=[{"run_id": "r2", "run_type": "document", "retryable": False,
                      "error_code": "no_text", "config": {"content_hash": BAD}}],
        good={H, V1, V2}, bad={BAD}, sources={H2},
        versions=[version("v1", "d1", H, True), version("v3", "d3", V1, False),
                  version("v4", "d3", V2, True), version("s1", "d4", H2, True, run=None)],
        documents=["d1", "d2", "d3", "d4"],
        versioned=[documents.Versioned(0, "d3", [v1, v2], {"r3": "succeeded", "r4": "succeeded"},
                                       {"r3": False, "r4": True})])


def _file(no: int, **kw: Any) -> RecordsFile:
    options = {"rows": 2, "expected": {f"IM-{no:04d}-1": "10.00", f"IM-{no:04d}-2": "20.00"}}
    return RecordsFile(no, "judgments", f"f{no}.csv", f"file {no}".encode(), **{**options, **kw})


def _imports() -> imports.Facts:
    ok, over = _file(1), _file(2, expect_fail=True, invalid=2, expected={})
    sent = [Import(ok, 202, batch_id="b1"), Import(over, 202, batch_id="b2"),
            Import(ok, 200, batch_id="b1", duplicate=True)]
    batches = {"b1": {"status": "completed", "rejectionReason": None, "rowCountTotal": 2,
                      "rowCountInserted": 2, "rowCountInvalid": 0, "rowCountDuplicate": 0},
               "b2": {"status": "failed", "rejectionReason": "over budget", "rowCountTotal": 2,
                      "rowCountInserted": 0, "rowCountInvalid": 2, "rowCountDuplicate": 0}}
    stored = [{"batch_id": "b1", "file_hash": hashlib.sha256(ok.body).hexdigest()},
              {"batch_id": "b2", "file_hash": hashlib.sha256(over.body).hexdigest()}]
    hook = Received("w1", {}, json.dumps({"type": "ingestion.complete",
                                          "data": {"upload_id": "b1"}}).encode(), 200, None)
    return imports.Facts(sent, batches, stored=stored,
                         rows={1: list(ok.expected.items()), 2: []},
                         events=[{"event_id": "e1", "batch_id": "b1"}],
                         endpoints=[imports.Delivered("healthy", True, [hook]),
                                    imports.Delivered("flaky", False, [])])


def _event(seq: int, entity: str, poison: bool = False) -> Event:
    body = {"source_system": "soak-crm", "source_event_id": f"soak-{seq}",
            "source_sequence": seq, "type": "judgment.upserted",
            "payload": {"File #": entity, "Amount": "a lot" if poison else f"{seq}.00",
                        "Defendant": "Ann Example"}}
    return Event(f"soak-{seq}", seq, entity, body, poison)


def _events() -> events.Facts:
    e1, e2, e3 = _event(1, "EV-1"), _event(2, "EV-1"), _event(3, "EV-2", poison=True)
    e4 = _event(4, "EV-3")  # sent, no answer; it landed: it may be the newest
    sent = {e.source_event_id: Sent(e, e.body, outcomes=["created"]) for e in (e1, e2, e3)}
    sent[e2.source_event_id].outcomes.append("duplicate")  # resent, acknowledged again
    sent[e4.source_event_id] = Sent(e4, e4.body, unanswered=1)

    def row(e: Event, state: str, attempts: int = 1) -> dict[str, Any]:
        return {"source_event_id": e.source_event_id, "source_sequence": e.sequence,
                "payload": e.body["payload"], "process_state": state, "superseded": False,
                "process_error": "bad amount" if state == "dead_letter" else None,
                "ingest_attempt_count": attempts}

    ledger = [row(e1, "processed"), row(e2, "processed", 2), row(e3, "dead_letter"),
              row(e4, "processed")]
    judgments = [{"case_number": "EV-1", "amount": Decimal("2.00")},
                 {"case_number": "EV-3", "amount": Decimal("4.00")}]
    return events.Facts(sent, ledger, judgments)


def _sources() -> sources.Facts:
    return sources.Facts({"s3://b/k1": H, "s3://b/k2": H2},
                         [{"source_uri": "s3://b/k1", "content_hash": H},
                          {"source_uri": "s3://b/k2", "content_hash": H2}],
                         final={"status": "succeeded"}, syncs=[{"status": "succeeded"}],
                         changes=3)


def _operators() -> operators.Facts:
    during = datetime.fromtimestamp(LOAD_END - 60, UTC)
    return operators.Facts(
        actions=[{"what": "run retry", "actor": "user:1", "created_at": during,
                  "reason": "soak: the admin's retry"}],
        load_end_at=LOAD_END, admin_actions=1,
        children={"moto": 1, "postgres": 2, "gateway-1": 3, "gateway-2": 4, "worker-1": 5},
        expected={"moto", "postgres", "gateway-1", "gateway-2", "worker-1"}, ready=True)


def _logs() -> logs.Facts:
    fault = Fault(1, "kill_postgres", "postgres", 100, 101, LOAD_END - 500, LOAD_END - 499)
    traceback = json.dumps({"ts": datetime.fromtimestamp(LOAD_END - 490, UTC).isoformat(),
                            "event": "request failed", "error_type": "OperationalError",
                            "traceback": "Traceback (most recent call last): ..."})
    return logs.Facts({"ingest-dev.log": traceback + "\n"}, {"Ann Example-Smith"}, [fault],
                      [Call("upload", "POST /v1/ingest", 1.0, 0.1, 202)])


HEALTHY: dict[Any, Callable[[], Any]] = {documents: _documents, imports: _imports,
                                         events: _events, sources: _sources,
                                         operators: _operators, logs: _logs}


def test_a_healthy_world_passes_every_invariant():
    for module, make in HEALTHY.items():
        failed = [v.line() + f" {v.problems}" for v in module.judge(make()) if not v.ok]
        assert not failed, failed


# ── one broken world per invariant ──────────────────────────────────────────────────────────
def _break_doc_run_left_running(f: documents.Facts) -> None:
    f.runs["r1"] = {"status": "running"}


def _break_retryable_lie(f: documents.Facts) -> None:
    f.failed_runs[0]["retryable"] = True


def _break_stuck(f: documents.Facts) -> None:
    f.stuck = [{"run_id": "r9", "status": "queued", "run_type": "document"}]


def _break_told_not_stored(f: documents.Facts) -> None:
    f.documents.remove("d1")


def _break_no_active_version(f: documents.Facts) -> None:
    f.versions[0]["is_active"] = False


def _break_unknown_bytes(f: documents.Facts) -> None:
    f.versions.append({**f.versions[0], "doc_version_id": "v9", "is_active": False,
                       "content_hash": "sha256:" + "f" * 64})


def _break_missing_vectors(f: documents.Facts) -> None:
    f.versions[0]["vectors"] = 1


def _break_half_version(f: documents.Facts) -> None:
    f.versions.append({**f.versions[0], "doc_version_id": "v8", "is_active": False,
                       "run_status": "failed"})


def _break_old_version_served(f: documents.Facts) -> None:
    f.versions[1]["is_active"], f.versions[2]["is_active"] = True, False


def _break_old_marker_found(f: documents.Facts) -> None:
    f.versioned[0].found["r3"] = True


def _break_batch_counts(f: imports.Facts) -> None:
    f.batches["b1"]["rowCountTotal"] = 3


def _break_budget(f: imports.Facts) -> None:
    f.batches["b2"] = {**f.batches["b1"]}


def _break_stored_unknown_batch(f: imports.Facts) -> None:
    f.stored.append({"batch_id": "b9", "file_hash": "e" * 64})


def _break_rows_twice(f: imports.Facts) -> None:
    f.rows[1].append(f.rows[1][0])


def _break_rows_of_failed_batch(f: imports.Facts) -> None:
    f.rows[2] = [("IM-0002-1", "10.00")]


def _break_no_completion_event(f: imports.Facts) -> None:
    f.events = []


def _break_delivery_twice(f: imports.Facts) -> None:
    hook = f.endpoints[0].received[0]
    f.endpoints[0].received.append(Received("w2", {}, hook.body, 200, None))


def _break_flaky_delivery_unknown(f: imports.Facts) -> None:
    f.endpoints[1].received.append(Received("w7", {}, json.dumps({
        "type": "ingestion.complete", "data": {"upload_id": "b7"}}).encode(), 200, None))


def _break_unacknowledged_loss(f: events.Facts) -> None:
    f.ledger = [r for r in f.ledger if r["source_event_id"] != "soak-1"]


def _break_attempts_not_counted(f: events.Facts) -> None:
    f.ledger[1]["ingest_attempt_count"] = 1


def _break_payload_changed(f: events.Facts) -> None:
    f.ledger[0]["payload"] = {**f.ledger[0]["payload"], "Court": "Altered"}


def _break_pending(f: events.Facts) -> None:
    f.ledger[0]["process_state"] = "pending"


def _break_poison_applied(f: events.Facts) -> None:
    f.ledger[2]["process_state"], f.ledger[2]["process_error"] = "processed", None


def _break_older_wins(f: events.Facts) -> None:
    f.judgments[0]["amount"] = Decimal("1.00")


def _break_judgment_from_nothing(f: events.Facts) -> None:
    f.judgments.append({"case_number": "EV-2", "amount": Decimal("3.00")})


def _break_source_served_twice_other_bytes(f: sources.Facts) -> None:
    f.served.append({"source_uri": "s3://b/k2", "content_hash": H})


def _break_source_missing(f: sources.Facts) -> None:
    f.served.pop()


def _break_settle_action(f: operators.Facts) -> None:
    f.actions.append({"what": "run redrive", "actor": "cli:ops", "reason": "unstick it",
                      "created_at": datetime.fromtimestamp(LOAD_END + 30, UTC)})


def _break_process_down(f: operators.Facts) -> None:
    f.children["gateway-2"] = None


def _break_personal_data(f: logs.Facts) -> None:
    f.logs["ingest-dev.log"] += '{"event": "row", "name": "Ann Example-Smith"}\n'


def _break_unexplained_traceback(f: logs.Facts) -> None:
    f.logs["ingest-dev.log"] += json.dumps({"ts": datetime.fromtimestamp(
        LOAD_END - 100, UTC).isoformat(), "event": "boom", "error_type": "KeyError",
        "traceback": "Traceback (most recent call last): ..."}) + "\n"


def _break_500(f: logs.Facts) -> None:
    f.calls.append(Call("search", "GET /v1/search", 5.0, 0.1, 500))


BROKEN = [
    (documents, "1a", _break_doc_run_left_running), (documents, "1b", _break_retryable_lie),
    (documents, "1c", _break_stuck), (documents, "1d", _break_told_not_stored),
    (documents, "1d", _break_no_active_version), (documents, "1d", _break_unknown_bytes),
    (documents, "1e", _break_missing_vectors), (documents, "1f", _break_half_version),
    (documents, "1g", _break_old_version_served), (documents, "1g", _break_old_marker_found),
    (imports, "2a", _break_batch_counts), (imports, "2a", _break_stored_unknown_batch),
    (imports, "2b", _break_budget), (imports, "2c", _break_rows_twice),
    (imports, "2c", _break_rows_of_failed_batch), (imports, "2d", _break_no_completion_event),
    (imports, "2e", _break_delivery_twice), (imports, "2f", _break_flaky_delivery_unknown),
    (events, "3a", _break_unacknowledged_loss), (events, "3a", _break_attempts_not_counted),
    (events, "3a", _break_payload_changed), (events, "3b", _break_pending),
    (events, "3b", _break_poison_applied), (events, "3c", _break_older_wins),
    (events, "3c", _break_judgment_from_nothing),
    (sources, "4", _break_source_served_twice_other_bytes), (sources, "4", _break_source_missing),
    (operators, "5a", _break_settle_action), (operators, "5b", _break_process_down),
    (logs, "6a", _break_personal_data), (logs, "6b", _break_unexplained_traceback),
    (logs, "6c", _break_500),
]


@pytest.mark.parametrize(("module", "key", "breaks"), BROKEN,
                         ids=[f"{key}-{fn.__name__.removeprefix('_break_')}"
                              for _, key, fn in BROKEN])
def test_each_invariant_fails_in_a_world_broken_its_way(module, key, breaks):
    facts = copy.deepcopy(HEALTHY[module]())
    breaks(facts)
    verdicts = {v.key: v for v in module.judge(facts)}
    assert not verdicts[key].ok, f"{key} held in a broken world: {verdicts[key].line()}"


def test_every_invariant_of_the_soak_has_a_broken_world():
    keys = {v.key for module, make in HEALTHY.items() for v in module.judge(make())}
    assert keys == {key for _, key, _ in BROKEN}


# ── recovery from the clients' side ─────────────────────────────────────────────────────────
def test_recovery_is_measured_from_the_fault_to_the_first_request_served_after_the_failures():
    kill = Fault(1, "kill_postgres", "postgres", 100.0, 100.1, 0, 0)
    term = Fault(2, "term_worker", "worker-1", 200.0, 200.1, 0, 0)
    calls = [Call("e", "POST /v1/events", 99.0, 0.1, 202),       # before: not counted
             Call("e", "POST /v1/events", 101.0, 3.0, 503),      # failing...
             Call("u", "POST /v1/ingest", 105.0, 0.2, None),
             Call("e", "POST /v1/events", 104.0, 0.5, 202),      # served, but failures follow
             Call("e", "POST /v1/events", 112.0, 0.5, 202),      # served after the last one
             Call("u", "POST /v1/ingest", 205.0, 0.2, 202)]      # the worker's: nobody failed
    outcomes = [Outcome("e", "POST /v1/events", 101.0, 112.5, 202, 3),
                Outcome("u", "POST /v1/ingest", 105.0, 130.0, None, 5),
                Outcome("u", "POST /v1/ingest", 205.0, 205.2, 202, 1)]
    pg, worker = report.client_recovery([kill, term], calls, outcomes, load_end_s=400)
    assert (pg.failed_attempts, pg.served_again_s, pg.requests, pg.succeeded) == (2, 12.5, 2, 1)
    assert (worker.failed_attempts, worker.served_again_s, worker.succeeded) == (0, 0.0, 1)
    lines = report.targets([pg, worker])
    assert any(line.strip().startswith("met: clients served again after a Postgres kill")
               for line in lines), lines
