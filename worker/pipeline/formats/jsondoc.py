"""JSON as a document: every value on a line under its flattened key path (`a.b[2].c: value`),
one block per top-level record, so a record and its fields stay in one chunk. JSON Lines and
concatenated values are read as a list of records."""

from __future__ import annotations

import json
from collections.abc import Iterator

from worker.pipeline.formats import common

_MAX_DEPTH = 64


def read(data: bytes, limits: common.Limits) -> common.Doc:
    try:
        # The standard library, not orjson: integers past 64 bits are valid JSON too.
        value = _values(common.decode_text(data).lstrip("\ufeff"))
    except json.JSONDecodeError as exc:
        raise common.not_a("JSON file", f"it does not parse ({exc.msg} at line {exc.lineno}); "
                           "fix it or upload it as .txt.") from exc
    except RecursionError as exc:
        raise common.not_a("JSON file we can read", "it nests too deeply; flatten it or upload "
                           "it as .txt.") from exc
    doc = common.Doc()
    if isinstance(value, dict):
        records = [(_key("", str(k)), v) for k, v in value.items()]
    elif isinstance(value, list):
        records = [(f"[{i}]", v) for i, v in enumerate(value)]
    else:
        records = [("", value)]
    lines = 0
    for path, record in records:
        block = list(_flatten(path, record, 0))
        lines += len(block)
        if lines > limits.max_cells:
            raise common.too_large("JSON file", limits.max_cells, "values")
        doc.add("\n".join(block))
    return doc


def _values(text: str) -> object:
    """One JSON value; or, for JSON Lines and concatenated values (one object after another,
    as log and pipeline configs are written), the list of them."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        if exc.msg != "Extra data":
            raise
    decoder, values, at = json.JSONDecoder(), [], 0
    while at < len(text):
        value, at = decoder.raw_decode(text, at)
        values.append(value)
        while at < len(text) and text[at] in " \t\r\n":
            at += 1
    return values


def _key(prefix: str, key: str) -> str:
    plain = key.replace("_", "").replace("-", "").isalnum()
    name = key if plain else json.dumps(key, ensure_ascii=False)
    return f"{prefix}.{name}" if prefix else name


def _flatten(path: str, value: object, depth: int) -> Iterator[str]:
    if depth > _MAX_DEPTH:
        yield f"{path}: {common.one_line(json.dumps(value, ensure_ascii=False))}"
    elif isinstance(value, dict):
        if not value:
            yield f"{path}: {{}}"
        for key, item in value.items():
            yield from _flatten(_key(path, str(key)), item, depth + 1)
    elif isinstance(value, list):
        if not value:
            yield f"{path}: []"
        for index, item in enumerate(value):
            yield from _flatten(f"{path}[{index}]", item, depth + 1)
    else:
        shown = "null" if value is None else str(value).lower() if isinstance(value, bool) else value
        yield f"{path}: {common.one_line(str(shown))}" if path else common.one_line(str(shown))
