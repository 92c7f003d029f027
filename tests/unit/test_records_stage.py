"""The records stage's chunk bookkeeping (worker/records/stage.py)."""

from worker.records import stage


def test_a_chunk_after_a_full_one_is_empty_until_a_row_arrives():
    # A file of exactly 10,000 rows ends with an empty chunk after the first: nothing to write.
    chunk = stage.Chunk(previous=10_000)
    assert len(chunk) == 0 and chunk.last == 10_000 and not chunk.rows
