"""How pages show times, durations and sizes; static/app.js formats live updates the same way."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

STATUS_LABELS = {"queued": "Queued", "running": "Running", "succeeded": "Succeeded",
                 "failed": "Failed", "completed_with_errors": "Completed with errors",
                 "skipped": "Skipped"}
RUN_TYPES = {"manual_upload": "Upload", "s3_sync": "S3 sync", "attachment": "E-mail attachment"}


def timestamp(value: datetime | str | None) -> str:
    """UTC, to the second; the page's script rewrites it in the reader's own time zone."""
    if value is None:
        return "—"
    if isinstance(value, str):
        value = datetime.fromisoformat(value)
    return value.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def iso(value: datetime | None) -> str:
    return value.isoformat() if value else ""


def duration(seconds: float | None) -> str:
    if seconds is None:
        return "—"
    if seconds < 1:
        return f"{round(seconds * 1000)} ms"
    if seconds < 60:
        return f"{seconds:.1f} s"
    minutes, secs = divmod(round(seconds), 60)
    if minutes < 60:
        return f"{minutes} min {secs} s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes} min"


def size(n: int | float | None) -> str:
    if n is None:
        return "—"
    for unit in ("bytes", "KB", "MB", "GB"):
        if n < 1024 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "bytes" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GB"  # pragma: no cover - the loop always returns


def depth(value: int | dict[str, int] | None) -> str:
    """A queue depth: a count, or {visible, in_flight} as the depth cache keeps it."""
    if value is None:
        return "—"
    if isinstance(value, dict):
        visible, in_flight = value.get("visible", 0), value.get("in_flight", 0)
        return f"{visible + in_flight}" + (f" ({in_flight} in flight)" if in_flight else "")
    return str(value)


def percent(progress: float | None) -> int:
    return round((progress or 0) * 100)


def status_label(status: str | None) -> str:
    return STATUS_LABELS.get(status or "", status or "—")


def run_type(value: str | None) -> str:
    return RUN_TYPES.get(value or "", value or "—")


def run_title(run: dict[str, Any]) -> str:
    config = run.get("config") or {}
    return (config.get("title") or config.get("original_filename") or config.get("key")
            or str(run["run_id"]))


def run_timings(run: dict[str, Any]) -> dict[str, float | None]:
    """Queue wait = started_at − created_at; processing = finished_at − started_at (§4.2)."""
    created, started, finished = run["created_at"], run["started_at"], run["finished_at"]
    return {
        "queue_wait_s": (started - created).total_seconds() if started else None,
        "processing_s": (finished - started).total_seconds() if started and finished else None,
    }


# Pipeline order; static/runs.js orders live updates the same way.
STAT_ORDER = ("docs_processed", "chunks_created", "tokens_total", "chars", "pages", "duration_ms",
              "stages", "read_ms", "extract_ms", "chunk_ms", "embed_ms", "index_ms")


def _ordered(items: dict[str, Any]) -> list[tuple[str, Any]]:
    def rank(key: str) -> tuple[int, str]:
        return (STAT_ORDER.index(key) if key in STAT_ORDER else len(STAT_ORDER), key)
    return sorted(items.items(), key=lambda kv: rank(kv[0]))


# Words for the figures the workers record (worker/pipeline/runner.py, worker/records/
# pipeline.py); the run page hands this table to static/runs.js for live updates. A key not
# listed is shown by its name, and a *_ms figure as a duration either way.
STAT_LABELS = {
    "docs_processed": "Documents processed", "chunks_created": "Chunks", "tokens_total": "Tokens",
    "chars": "Characters", "pages": "Pages", "duration_ms": "Total time",
    "stages": "Time per stage", "parse_ms": "Parsing", "db_ms": "Database writes",
    "rows_total": "Rows", "rows_invalid": "Invalid rows", "rows_duplicate": "Duplicate rows",
    "rows_inserted": "Rows inserted", "rows_updated": "Rows updated",
    "rows_unchanged": "Rows unchanged",
}


def stat_label(key: str) -> str:
    if key in STAT_LABELS:
        return STAT_LABELS[key]
    stage = dict(STAGES).get(key.removesuffix("_ms")) if key.endswith("_ms") else None
    words = stage or key.removesuffix("_ms").replace("_", " ")
    return words[:1].upper() + words[1:]


def stat_text(key: str, value: Any) -> str:
    if value is None:
        return "—"
    if key.endswith("_ms") and isinstance(value, int | float) and not isinstance(value, bool):
        return duration(value / 1000)
    if isinstance(value, int) and not isinstance(value, bool):
        return f"{value:,}"
    return str(value)


def stats_entries(stats: dict[str, Any] | None) -> list[tuple[str, str]]:
    """A run's stats as (label, text) pairs in words; nested figures (the time per stage) on
    one line."""
    def text(key: str, value: Any) -> str:
        if isinstance(value, dict):
            return ", ".join(f"{stat_label(k)} {stat_text(k, v)}" for k, v in _ordered(value))
        return stat_text(key, value)
    return [(stat_label(key), text(key, value)) for key, value in _ordered(stats or {})]


# The pipeline's stages in order, with words for people (worker/pipeline/runner.py's keys).
STAGES = (("read", "Read the file"), ("extract", "Extract the text"), ("chunk", "Split into chunks"),
          ("embed", "Compute embeddings"), ("index", "Index for search"))
ATTEMPT_KINDS = {"delivery": "First pick-up", "takeover": "Takeover", "retry": "Retry",
                 "redrive": "Redrive"}
ATTEMPT_OUTCOMES = {"succeeded": "Succeeded", "failed": "Failed",
                    "released": "Released (passing fault)", "taken_over": "Taken over"}


def attempt_kind(kind: str | None) -> str:
    return ATTEMPT_KINDS.get(kind or "", kind or "—")


def attempt_outcome(outcome: str | None, started_at: Any = None) -> str:
    if outcome is None:
        return "Running" if started_at else "Waiting for a worker"
    return ATTEMPT_OUTCOMES.get(outcome, outcome)


def stage_timeline(run: dict[str, Any]) -> list[dict[str, str]]:
    """read → extract → chunk → embed → index for the run's latest attempt: the time each
    finished stage took, the stage under way, the ones not reached. static/runs.js redraws it
    the same way while the run is live."""
    attempts = run.get("attempts") or []
    stages = dict((attempts[-1]["stages"] if attempts else None) or
                  (run.get("stats") or {}).get("stages") or {})
    steps = []
    for key, label in STAGES:
        ms = stages.get(f"{key}_ms")
        if ms is not None:
            steps.append({"state": "done", "label": label, "text": duration(ms / 1000)})
        elif run.get("status") == "running" and run.get("stage") == key:
            steps.append({"state": "active", "label": label, "text": "under way"})
        elif run.get("status") == "failed" and run.get("stage") == key:
            steps.append({"state": "failed", "label": label, "text": "failed here"})
        else:
            steps.append({"state": "pending", "label": label, "text": "—"})
    return steps


FILTERS = {"attempt_kind": attempt_kind, "attempt_outcome": attempt_outcome,
           "stage_timeline": stage_timeline, "timestamp": timestamp, "iso": iso, "duration": duration, "size": size,
           "percent": percent, "status_label": status_label, "run_type": run_type,
           "run_title": run_title, "run_timings": run_timings,
           "stats_entries": stats_entries, "depth": depth}
