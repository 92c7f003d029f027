"""Read a CSV records file as chunks of columns (issue 31, docs/decisions/0271).

The file is read as worker/records/parse.py reads it — encoding, delimiter, header among the
title lines, decimal separator, blank lines, export furniture, row numbers — but its body is
split by pyarrow's CSV reader, a block at a time, into one column of text per header column.
A row pyarrow cannot split into exactly the header's columns (a note under the table, a short
or a too-wide row, a quote left open) comes back through its invalid-row handler with its
record number; the csv module reads it, and it takes its place among the others. Blank rows and
furniture are found over whole columns. Where pyarrow cannot read the file at all (a record
longer than a block) or a row the csv module refuses (a malformed file), the file is read again
by parse.Reader, the per-row reader, from its start: it reads exactly the same rows, or fails
the file with the line that is wrong.

A file that is not UTF-8 is first written out as UTF-8 (a temporary copy), so pyarrow only ever
reads UTF-8. Memory stays flat: one block of the file and one chunk of rows at a time.
"""

from __future__ import annotations

import csv
import io
import shutil
import tempfile
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from shared import contracts
from shared.contracts import columnar as c
from worker.records import columns, parse

# Bytes pyarrow reads and splits at a time.
BLOCK_BYTES = 1 << 20
UTF8 = ("utf-8", "utf-8-sig")


@dataclass
class Chunk:
    """Rows (previous, last] of the file: ``cells`` holds ``row``, ``c0``… and ``too_wide``;
    ``odd`` the cells of rows that are not the header's width (for their raw evidence)."""

    cells: pl.DataFrame
    previous: int
    last: int
    odd: dict[int, list[str]] = field(default_factory=dict)
    header: tuple[str, ...] = ()

    def validated(self, contract: contracts.Contract, match: contracts.HeaderMatch
                  ) -> tuple[columns.Validated, dict[int, dict[str, Any]]]:
        """The chunk validated column-wise, and the raw rows of those with issues."""
        validated = columns.validate(self.cells, contract, match)
        return validated, self.raw(validated.issues["row"].unique().to_list())

    def raw(self, rows: Sequence[int]) -> dict[int, dict[str, Any]]:
        """The rows as the file had them (header → cell, bounded): an issue's evidence."""
        header = self.header
        wanted = self.cells.filter(pl.col("row").is_in(list(rows)))
        width = len(header)
        out = {}
        for record in wanted.iter_rows():
            number = record[0]
            cells = self.odd.get(number) or list(record[1:1 + width])
            out[number] = parse.raw_row(header, cells)
        return out


class _Fallback(Exception):
    """pyarrow cannot read the file as the csv module would: read it with parse.Reader."""


class Table:
    """One CSV file: ``open()`` reads its header (and how it is written), ``chunks()`` its rows
    in chunks of columns."""

    def __init__(self, path: Path, contract: contracts.Contract,
                 decimal: str | None = None) -> None:
        self.path = path
        self.contract = contract
        self.decimal_option = decimal
        self.encoding = parse.detect_encoding(path)
        self.parsed: parse.ParsedFile | None = None
        self.last = 0  # the number of the last row read, skipped or not
        self._temp: tempfile.TemporaryDirectory[str] | None = None
        self.source = self._utf8(path)
        self.size = max(1, self.source.stat().st_size)
        self._offset = 0
        self._fh: Any = None
        self._ahead: list[tuple[pl.DataFrame, list[tuple[int, list[str]]]]] = []
        self._fallback: _Fallback | None = None

    def close(self) -> None:
        if self._fh is not None:
            self._fh.close()
        if self._temp is not None:
            self._temp.cleanup()

    def __enter__(self) -> Table:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def position(self) -> float:
        """How far through the file, 0..1, for progress."""
        try:
            return min(1.0, self._fh.tell() / self.size) if self._fh is not None else 0.0
        except (OSError, ValueError):
            return 0.0

    @property
    def header(self) -> tuple[str, ...]:
        assert self.parsed is not None
        return self.parsed.header

    # ── the head of the file ──────────────────────────────────────────────────────────────
    def _utf8(self, path: Path) -> Path:
        if self.encoding.codec in UTF8:
            return path
        self._temp = tempfile.TemporaryDirectory(prefix="records-utf8-")
        target = Path(self._temp.name) / "file.csv"
        with open(path, encoding=self.encoding.codec, newline="") as src, \
                open(target, "w", encoding="utf-8", newline="") as dst:
            shutil.copyfileobj(src, dst, 1 << 20)
        return target

    def open(self) -> parse.ParsedFile:
        """Read the header and the first rows: the file's delimiter, header match, titles
        and decimal separator (BatchRejected when the file cannot be read as a whole)."""
        with open(self.source, encoding="utf-8-sig", newline="") as fh:
            sample = fh.read(parse.SNIFF_CHARS)
        delimiter = parse.choose_delimiter(sample, self.contract)
        header, titles, self._offset = self._find_header(delimiter)
        self.parsed = parse.accept_header(self.contract, header, delimiter, titles,
                                          self.encoding)
        self._fh = open(self.source, "rb")  # noqa: SIM115 - closed by close()
        self._fh.seek(self._offset)
        self._batches = self._arrow_batches()
        records: list[list[str]] = []
        while len(records) < parse.LOOKAHEAD_ROWS:
            try:
                batch = next(self._batches)
            except StopIteration:
                break
            except _Fallback as exc:
                self._fallback = exc
                break
            self._ahead.append(batch)
            records += _records(*batch, len(header), parse.LOOKAHEAD_ROWS - len(records))
        decimal = self.decimal_option or (
            parse.decimal_of(self.contract, self.parsed.match, records)
            if self._fallback is None else self._python_decimal())
        self.parsed.match = replace(self.parsed.match, decimal=decimal)
        return self.parsed

    def _python_decimal(self) -> str | None:
        """The decimal separator parse.Reader learns from the file's first rows (the rows
        pyarrow gave up on are read by it anyway)."""
        with parse.Reader(self.path, self.contract, "csv", decimal=self.decimal_option) as reader:
            try:
                next(iter(reader.rows()), None)
            except parse.BatchRejected:
                return None  # the file fails when its rows are read
            return reader.parsed.match.decimal if reader.parsed is not None else None

    def _find_header(self, delimiter: str) -> tuple[list[str], list[str], int]:
        """parse.Reader's header search, also saying where (in bytes) the header ends."""
        bom = 3 if self.encoding.codec == "utf-8-sig" else 0
        with open(self.source, encoding="utf-8-sig", newline="") as fh:
            lines = _Lines(fh, bom)
            reader = csv.reader(lines, strict=True, delimiter=delimiter)
            found = [(line, lines.consumed) for line in parse.header_lines(reader, self.contract)]
        if not found:
            raise parse._empty(Counter())
        best, titles = parse.pick_header(self.contract, [line for line, _ in found])
        return found[best][0], titles, found[best][1]

    # ── the body ──────────────────────────────────────────────────────────────────────────
    def chunks(self, chunk_rows: int, after: int = 0) -> Iterator[Chunk]:
        """Chunks of ``chunk_rows`` rows, the rows up to ``after`` skipped (staged before a
        takeover). BatchRejected when the file has no row, or is malformed."""
        assert self.parsed is not None, "open() first"
        pending: list[tuple[pl.DataFrame, dict[int, list[str]]]] = []
        rows, emitted = 0, after
        try:
            for frame, odd in self._rows():
                frame = frame.filter(pl.col("row") > after)
                if frame.height:
                    pending.append((frame, odd))
                    rows += frame.height
                while rows >= chunk_rows:
                    chunk, pending, rows = _take(pending, chunk_rows, emitted, self.header)
                    emitted = chunk.last
                    yield chunk
        except _Fallback:
            yield from self._python_chunks(chunk_rows, max(after, emitted), pending)
            return
        if rows:
            chunk, pending, rows = _take(pending, rows, emitted, self.header)
            yield chunk
        if self.last == 0:
            raise parse._empty(self.parsed.skipped)

    def _rows(self) -> Iterator[tuple[pl.DataFrame, dict[int, list[str]]]]:
        """Each batch's rows: blank rows and furniture left out (counted), numbered."""
        assert self.parsed is not None
        width = len(self.header)
        furniture = _Furniture(self.contract, self.parsed.match)
        while self._ahead or self._batches is not None:
            if self._ahead:
                frame, odd = self._ahead.pop(0)
            elif self._fallback is not None:
                raise self._fallback
            else:
                try:
                    frame, odd = next(self._batches)
                except StopIteration:
                    return
            cells = _with_odd(frame, odd, width)
            keep, reasons = furniture.keep(cells, dict(odd))
            self.parsed.skipped.update(reasons)
            cells = cells.filter(keep)
            numbers = pl.int_range(self.last + 1, self.last + 1 + cells.height, dtype=pl.Int64,
                                   eager=True)
            full = dict(odd)
            odd_rows = {n: full[r] for n, r in zip(numbers.to_list(), cells["record"].to_list(),
                                                   strict=True) if r in full}
            self.last += cells.height
            yield cells.drop("record").insert_column(0, numbers.alias("row")), odd_rows

    _batches: Iterator[tuple[pl.DataFrame, list[tuple[int, list[str]]]]]

    def _arrow_batches(self) -> Iterator[tuple[pl.DataFrame, list[tuple[int, list[str]]]]]:
        """pyarrow's batches: (cells with each row's record number, the rows of another width
        among them as (record, cells)). _Fallback where pyarrow and the csv module part."""
        import pyarrow as pa
        import pyarrow.csv as pacsv

        assert self.parsed is not None
        width = len(self.header)
        delimiter = self.parsed.delimiter or ","
        names = [f"c{i}" for i in range(width)]
        bad: list[tuple[int, str]] = []

        def odd(row: Any) -> str:
            bad.append((row.number, row.text))
            return "skip"

        try:
            reader = pacsv.open_csv(
                self._fh,
                read_options=pacsv.ReadOptions(column_names=names, use_threads=False,
                                               block_size=BLOCK_BYTES),
                parse_options=pacsv.ParseOptions(
                    delimiter=delimiter, quote_char='"', double_quote=True, escape_char=False,
                    newlines_in_values=True, ignore_empty_lines=True, invalid_row_handler=odd),
                convert_options=pacsv.ConvertOptions(
                    column_types={name: pa.string() for name in names}, null_values=[],
                    strings_can_be_null=False, quoted_strings_can_be_null=False))
            valid, taken = 0, 0
            for batch in reader:
                frame = pl.from_arrow(batch)
                assert isinstance(frame, pl.DataFrame)
                records = _record_numbers(valid, frame.height, [b[0] for b in bad])
                valid += frame.height
                upto = int(records[-1]) if len(records) else 0
                mine = [b for b in bad[taken:] if b[0] < upto]
                taken += len(mine)
                yield (frame.with_columns(pl.Series("record", records, dtype=pl.Int64)),
                       [(n, _split(text, delimiter)) for n, text in mine])
            if bad[taken:]:
                yield (pl.DataFrame(schema={**{name: pl.String for name in names},
                                            "record": pl.Int64}),
                       [(n, _split(text, delimiter)) for n, text in bad[taken:]])
        except pa.ArrowInvalid as exc:
            raise _Fallback(str(exc)) from exc

    def _python_chunks(self, chunk_rows: int, after: int,
                       pending: list[tuple[pl.DataFrame, dict[int, list[str]]]]
                       ) -> Iterator[Chunk]:
        """The rest of the file through parse.Reader (from its start, rows up to ``after``
        skipped): its rows, or the file's failure with the line that is wrong."""
        assert self.parsed is not None
        with parse.Reader(self.path, self.contract, "csv",
                          decimal=self.parsed.match.decimal) as reader:
            block: list[tuple[int, Sequence[str]]] = []
            last = seen = after
            for number, cells, _raw in reader.rows():
                seen = number
                if number <= after:
                    continue
                block.append((number, list(cells)))  # type: ignore[arg-type]
                if len(block) == chunk_rows:
                    yield _python_chunk(block, self.header, last)
                    last, block = block[-1][0], []
            if block:
                yield _python_chunk(block, self.header, last)
            assert reader.parsed is not None
            self.parsed.skipped.clear()
            self.parsed.skipped.update(reader.parsed.skipped)
            self.last = max(self.last, seen)


# ── pieces ───────────────────────────────────────────────────────────────────────────────────
class _Lines:
    """A text file's lines for the csv module, counting the UTF-8 bytes handed out."""

    def __init__(self, fh: Any, start: int) -> None:
        self.fh, self.consumed = fh, start

    def __iter__(self) -> _Lines:
        return self

    def __next__(self) -> str:
        line = self.fh.readline()
        if not line:
            raise StopIteration
        self.consumed += len(line.encode("utf-8", "surrogatepass"))
        return str(line)


def _split(text: str, delimiter: str) -> list[str]:
    """One record pyarrow could not fit, read by the csv module (strict, as parse.Reader)."""
    try:
        records = list(csv.reader(io.StringIO(text, newline=""), delimiter=delimiter,
                                  strict=True))
    except csv.Error as exc:
        raise _Fallback(str(exc)) from exc
    if len(records) != 1:
        raise _Fallback("a record pyarrow read as one is not one")
    return records[0]


def _record_numbers(valid: int, count: int, bad: list[int]) -> Any:
    """The record numbers (1: the first record after the header) of valid rows ``valid`` …
    ``valid + count - 1``, given the records pyarrow handed to the invalid-row handler."""
    positions = np.arange(valid, valid + count, dtype=np.int64)
    if not bad:
        return positions + 1
    before = np.asarray(bad, dtype=np.int64) - 1 - np.arange(len(bad), dtype=np.int64)
    return positions + 1 + np.searchsorted(before, positions, side="right")


def _with_odd(frame: pl.DataFrame, odd: list[tuple[int, list[str]]], width: int
              ) -> pl.DataFrame:
    """A batch's rows and its odd ones, in record order; ``too_wide`` where a row has cells
    past the header that are not blank."""
    frame = frame.with_columns(pl.lit(False).alias("too_wide"))
    if not odd:
        return frame
    rows = {f"c{i}": [cells[i] if i < len(cells) else "" for _, cells in odd]
            for i in range(width)}
    extra = pl.DataFrame({**rows, "record": [n for n, _ in odd],
                          "too_wide": [len(cells) > width and any(x.strip() for x in
                                                                  cells[width:])
                                       for _, cells in odd]},
                         schema={**{f"c{i}": pl.String for i in range(width)},
                                 "record": pl.Int64, "too_wide": pl.Boolean})
    return pl.concat([frame, extra.select(frame.columns)]).sort("record")


def _records(frame: pl.DataFrame, odd: list[tuple[int, list[str]]], width: int, limit: int
             ) -> list[list[str]]:
    """A batch's first ``limit`` records as lists of cells, in order (what parse.decimal_of
    reads: a block holds ~9,000 rows, the lookahead 2,000)."""
    both = _with_odd(frame, odd, width).head(limit)
    full = dict(odd)
    return [full.get(r[-2]) or list(r[:width]) for r in both.iter_rows()]


def _take(pending: list[tuple[pl.DataFrame, dict[int, list[str]]]], rows: int, previous: int,
          header: tuple[str, ...]) -> tuple[Chunk, list[tuple[pl.DataFrame, dict[int, list[str]]]],
                                            int]:
    """The first ``rows`` pending rows as a chunk, and what is left."""
    frames, odd, left, need = [], {}, [], rows
    for frame, odd_rows in pending:
        if need <= 0:
            left.append((frame, odd_rows))
            continue
        head = frame.head(need)
        frames.append(head)
        odd.update(odd_rows)
        need -= head.height
        if frame.height > head.height:
            left.append((frame.slice(head.height), odd_rows))
    cells = pl.concat(frames)
    last = int(cells["row"][-1])
    chunk = Chunk(cells, previous, last, {n: v for n, v in odd.items() if previous < n <= last},
                  header)
    return chunk, left, sum(f.height for f, _ in left)


def _python_chunk(block: list[tuple[int, Sequence[str]]], header: tuple[str, ...],
                  previous: int) -> Chunk:
    width = len(header)
    data: dict[str, Any] = {"row": [n for n, _ in block]}
    for i in range(width):
        data[f"c{i}"] = [cells[i] if i < len(cells) else "" for _, cells in block]
    data["too_wide"] = [len(cells) > width and any(x.strip() for x in cells[width:])
                        for _, cells in block]
    cells = pl.DataFrame(data, schema={"row": pl.Int64, **{f"c{i}": pl.String
                                                        for i in range(width)},
                                       "too_wide": pl.Boolean})
    odd = {n: list(x) for n, x in block if len(x) != width}
    return Chunk(cells, previous, block[-1][0], odd, header)


class _Furniture:
    """parse.Reader's blank-row and furniture tests over whole columns (the per-row test for
    the rows of another width)."""

    def __init__(self, contract: contracts.Contract, match: contracts.HeaderMatch) -> None:
        self.contract = contract
        self.empty = sorted(contract.empty_markers)
        self.dimensions = [match.index[col.name] for col in contract.columns
                           if col.name in match.index and parse.is_dimension(col)]
        self.wide = match.width >= 3
        self.per_row = parse.furniture_test(contract, match)

    def keep(self, cells: pl.DataFrame, odd: dict[int, list[str]]) -> tuple[pl.Series, Counter[str]]:
        """Which rows are records, and the reasons of those that are not (blank rows are not
        counted)."""
        width = len([name for name in cells.columns if name.startswith("c")])
        blank, reason = self._simple(cells, width) if _all_simple(cells, width) \
            else self._any(cells, width)
        if odd:
            records = cells["record"].to_list()
            fixed_blank, fixed_reason = blank.to_list(), reason.to_list()
            for i, record in enumerate(records):
                if record in odd:
                    row = odd[record]
                    fixed_blank[i] = not any(x.strip() for x in row)
                    fixed_reason[i] = self.per_row(row) if self.per_row is not None else None
            blank = pl.Series(fixed_blank, dtype=pl.Boolean)
            reason = pl.Series(fixed_reason, dtype=pl.String)
        reason = reason.set(blank, None)
        reasons = Counter({r: n for r, n in reason.drop_nulls().value_counts().iter_rows()})
        return ~blank & reason.is_null(), reasons

    def _simple(self, cells: pl.DataFrame, width: int) -> tuple[pl.Series, pl.Series]:
        """``_any`` where every cell is printable ASCII (an export, nearly always): Python's
        strip and casefold are then `strip_chars(" ")` and `to_lowercase`, and the whole test
        is one query (a 9,000-row batch of a Meta export: 29 → 8 ms; as a Series at a time,
        every step paid polars' fixed cost)."""
        stripped = [pl.col(f"c{i}").str.strip_chars(" ").alias(f"s{i}") for i in range(width)]
        void = [((pl.col(f"s{i}") == "") | pl.col(f"s{i}").is_in(self.empty)).alias(f"v{i}")
                for i in range(width)]
        blank = pl.all_horizontal([pl.col(f"s{i}") == "" for i in range(width)])
        frame = cells.lazy().select(stripped).with_columns(*void, blank.alias("_blank"))
        if self.per_row is None:
            out = frame.select("_blank", pl.lit(None, pl.String).alias("r")).collect()
            return out["_blank"], out["r"]
        frame = frame.with_columns(*self._first_filled(width))
        folded = [pl.col(name).str.to_lowercase().alias(f"f_{name}")
                  for name in ["first", *(f"s{p}" for p in self.dimensions)]]
        out = frame.with_columns(folded).select(
            "_blank", self._reason(width).alias("r")).collect()
        return out["_blank"], out["r"]

    def _any(self, cells: pl.DataFrame, width: int) -> tuple[pl.Series, pl.Series]:
        """Blank rows and each row's furniture reason (or null), any text."""
        stripped = {i: _strip(cells[f"c{i}"]) for i in range(width)}
        void = {i: (s == "") | s.is_in(self.empty) for i, s in stripped.items()}
        blank = pl.Series([True] * cells.height)
        for i in range(width):
            blank = blank & (stripped[i] == "")
        reason = pl.Series([None] * cells.height, dtype=pl.String)
        if self.per_row is not None:
            frame = pl.DataFrame({**{f"s{i}": s for i, s in stripped.items()},
                                  **{f"v{i}": v for i, v in void.items()}})
            frame = frame.with_columns(*self._first_filled(width))
            folded = {name: _casefold(frame[name]) for name in
                      ["first", *(f"s{p}" for p in self.dimensions)]}
            frame = frame.with_columns(**{f"f_{k}": v for k, v in folded.items()})
            reason = frame.select(self._reason(width).alias("r"))["r"]
        return blank, reason

    @staticmethod
    def _first_filled(width: int) -> tuple[pl.Expr, pl.Expr]:
        """Each row's first cell that is not void, and how many are not."""
        filled = pl.sum_horizontal([~pl.col(f"v{i}") for i in range(width)])
        first = pl.coalesce([pl.when(~pl.col(f"v{i}")).then(pl.col(f"s{i}"))
                             for i in range(width)] + [pl.lit("")])
        return first.alias("first"), filled.alias("filled")

    def _reason(self, width: int) -> pl.Expr:
        """The furniture reason over ``s``/``v`` (stripped, void) of each cell, ``first``,
        ``filled`` and the folded ``f_first``, ``f_s<p>`` of the dimensions."""
        contract = self.contract
        total = pl.lit(False)
        if contract.summary_prefixes:
            prefixes = list(parse.TOTAL_PREFIXES)
            starts = pl.col("f_first").str.starts_with
            total = pl.any_horizontal([starts(p) for p in prefixes])
            named_count = pl.sum_horizontal([~pl.col(f"v{p}") for p in self.dimensions]) \
                if self.dimensions else pl.lit(0)
            named_one = pl.coalesce([pl.when(~pl.col(f"v{p}")).then(pl.col(f"f_s{p}"))
                                     for p in self.dimensions] + [pl.lit(None, pl.String)])
            for p in self.dimensions:
                total = total | (~pl.col(f"v{p}") & pl.any_horizontal(
                    [pl.col(f"f_s{p}").str.starts_with(x) for x in prefixes]))
            total = total | (pl.col("f_first").is_in(list(parse.TOTAL_WORDS)) & (
                (named_count == 0) | ((named_count == 1) & (named_one == pl.col("f_first")))))
        reason: Any = pl.when(total).then(pl.lit("total row"))
        if contract.furniture:
            if self.wide:
                reason = reason.when(pl.col("filled") == 1).then(pl.lit("note"))
            if self.dimensions:
                reason = reason.when(pl.all_horizontal([pl.col(f"v{p}")
                                                        for p in self.dimensions])
                                     ).then(pl.lit("summary row"))
        return reason.otherwise(pl.lit(None, pl.String))


def _all_simple(cells: pl.DataFrame, width: int) -> bool:
    """Whether every cell of ``c0``… is printable ASCII (one query over the batch)."""
    if not width or not cells.height:
        return False
    found = cells.select(pl.all_horizontal([pl.col(f"c{i}").str.contains(c.SIMPLE).all()
                                            for i in range(width)]))
    return bool(found.item())


def _strip(cells: pl.Series) -> pl.Series:
    """Cells trimmed as Python's ``str.strip`` trims them."""
    simple = cells.str.contains(c.SIMPLE)
    fast = cells.str.strip_chars(" ")
    if bool(simple.all()):
        return fast
    return fast.zip_with(simple, c.python_map(cells.set(simple, None), str.strip, pl.String))


def _casefold(values: pl.Series) -> pl.Series:
    return c.per_value(values, lambda v: v.str.to_lowercase(), str.casefold, pl.String)
