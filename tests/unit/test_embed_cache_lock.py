"""Processes that start together make the model's int8 export and the variant choice once: one
makes it, the others wait on its lock and then find it made (shared/embedding/backends.py
cache_lock). Three exports side by side were seen in the suite's search tests; measuring the
variants side by side would also time each against the others' load."""

from __future__ import annotations

import os
import threading
from pathlib import Path

from shared.embedding import backends, choice
from tests.support.stack import wait_until
from tests.unit.test_embed_choice import FakeEmbedder, tokenizer  # noqa: F401 - the fixture


def _someone_waits_on(lock_file: Path) -> bool:
    """/proc/locks lists a blocked flock with "->" and the file's device:inode."""
    inode = f":{os.stat(lock_file).st_ino} "
    return any("->" in line and inode in line
               for line in Path("/proc/locks").read_text().splitlines())


def _in_thread(call) -> tuple[threading.Thread, list]:  # type: ignore[no-untyped-def]
    results: list = []
    thread = threading.Thread(target=lambda: results.append(call()), daemon=True)
    thread.start()
    return thread, results


def test_a_start_waits_for_the_export_under_way_and_does_not_export_again(tmp_path,
                                                                          monkeypatch):
    # Given a model folder and another process exporting it (it holds the export's lock)
    model = tmp_path / "model"
    model.mkdir()
    (model / "model.safetensors").write_bytes(b"weights")
    cache = tmp_path / "cache"
    exports: list[str] = []
    monkeypatch.setattr(backends, "_export_into", lambda path, target: exports.append(target))
    target = cache / f"{backends.weights_digest(model)}-{backends.ONNX_RECIPE}.onnx"
    with backends.cache_lock(cache, target.name):
        # When a second start asks for the export, it waits on the lock
        thread, results = _in_thread(lambda: backends.cached_onnx_model(model, cache,
                                                                        export_here=True))
        wait_until(lambda: _someone_waits_on(cache / f".{target.name}.lock"), timeout=30,
                   message="the second start waits on the export's lock")
        target.write_bytes(b"int8")  # the first process's export lands
    thread.join(30)

    # Then it uses that export and never exports itself
    assert results == [target]
    assert exports == []


def test_a_start_waits_for_the_measurement_under_way_and_keeps_its_choice(tmp_path,
                                                                         tokenizer):  # noqa: F811
    # Given a peer measuring the variants (it holds the choice's lock)
    waiting = FakeEmbedder(tmp_path, (11.4, 18.2), tokenizer)
    record = tmp_path / f"variant-{choice._profile_key(waiting)}.json"
    with backends.cache_lock(tmp_path, record.name):
        # When another start resolves auto meanwhile, it waits rather than measure alongside
        thread, results = _in_thread(lambda: choice.resolve(waiting, clock=waiting.clock))
        wait_until(lambda: _someone_waits_on(tmp_path / f".{record.name}.lock"), timeout=30,
                   message="the second start waits on the choice's lock")
        choice._write(record, {"chosen": "torch", "trials": [], "profile": {}})
    thread.join(30)

    # Then it takes the peer's choice and opens only that variant
    assert [chosen for chosen, _ in results] == ["torch"]
    assert waiting.opened == ["torch"]


def test_a_folder_that_cannot_be_written_takes_no_lock(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    with backends.cache_lock(blocker / "cache", "x"):
        pass  # no error: the entry cannot be cached there either, and the caller says so
