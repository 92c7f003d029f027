"""Validation in the worker's pool of processes gives exactly what validation in the job's
thread gives (worker/records/validate.py, docs/decisions/0184): the same staged rows, the same
codes on the same rows, in file order."""

from __future__ import annotations

import csv
import io
from pathlib import Path

import pytest

from shared import contracts
from tests.unit import test_contracts_judgments as units
from worker.records import parse, validate


def judgments_file(path: Path, rows: int) -> None:
    """Valid rows, and every row code of the contract's unit tests, spread over the file."""
    cases = [cells for cells, *_ in units.CRITICAL_CASES + units.WARNING_CASES]
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=units.HEADER)
    writer.writeheader()
    for i in range(rows):
        row = {**units.GOOD, "File #": f"2024-CV-{i:06d}"}
        if i % 7 == 3:
            row.update(cases[i % len(cases)])
        writer.writerow(row)
    path.write_text(out.getvalue(), encoding="utf-8")


def encoded(path: Path, pool: validate.Pool | None) -> list[tuple]:
    contract = contracts.get("judgments")
    with parse.Reader(path, contract, "csv") as reader:
        return [(row.row, row.staged, row.issues) for row in validate.encoded(
            reader.rows(), contract, ("judgments", None), lambda: reader.parsed.match, pool,
            lambda: reader.parsed.header)]


@pytest.mark.slow
def test_the_pool_validates_every_row_as_the_jobs_own_thread_does(tmp_path):
    # Given a file of several blocks, with every code of the contract in it
    path = tmp_path / "judgments.csv"
    judgments_file(path, 3 * validate.BLOCK_ROWS + 17)

    # When it is validated in the job's thread and in a pool of two processes
    alone = encoded(path, None)
    pooled = encoded(path, validate.pool(2, validate.POOL_MIN_BYTES))

    # Then both give the same rows, codes and order
    assert pooled == alone
    assert [r[0] for r in pooled] == list(range(1, 3 * validate.BLOCK_ROWS + 18))
    codes = {issue[2] for _row, _staged, issues in alone for issue in issues}
    assert {code for _cells, code, *_ in units.CRITICAL_CASES} <= codes


def test_a_small_file_or_one_process_is_validated_in_the_jobs_thread():
    assert validate.pool(2, validate.POOL_MIN_BYTES - 1) is None
    assert validate.pool(1, 10 * validate.POOL_MIN_BYTES) is None
