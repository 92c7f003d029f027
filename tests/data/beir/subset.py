"""Cut a BEIR-format folder down to a subset small enough to ingest through the API here.

    python tests/data/beir/subset.py SOURCE_FOLDER OUT_FOLDER --docs 1200 --per-query 12

Deterministic: the same source gives the same subset. Kept:
- every test query with at least one relevant document (score > 0) in the kept corpus;
- per query, its relevant documents, highest grade first then by the sha256 of the id, at most
  ``--per-query`` of them (MS MARCO's judged pools hold hundreds per query);
- then other documents of the source corpus, in the order of the sha256 of their ids, until
  ``--docs`` in all: those are the distractors, judged or not;
- the qrels of the kept queries and documents, as they were (grade 0 lines included).
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import json
from collections import defaultdict
from pathlib import Path


def _key(doc_id: str) -> str:
    return hashlib.sha256(doc_id.encode()).hexdigest()


def read_qrels(path: Path) -> list[tuple[str, str, int]]:
    rows = []
    with path.open(newline="") as f:
        for line in csv.reader(f, delimiter="\t"):
            if not line or line[0] == "query-id":
                continue
            query, doc, grade = line[0], line[-2] if len(line) == 4 else line[1], line[-1]
            rows.append((query, doc, int(grade)))
    return rows


def subset(source: Path, out: Path, *, docs: int, per_query: int) -> None:
    corpus = [json.loads(line) for line in (source / "corpus.jsonl").open() if line.strip()]
    queries = [json.loads(line) for line in (source / "queries.jsonl").open() if line.strip()]
    qrels = read_qrels(source / "qrels" / "test.tsv")
    relevant: dict[str, list[tuple[int, str]]] = defaultdict(list)
    for query, doc, grade in qrels:
        if grade > 0:
            relevant[query].append((grade, doc))
    known = {d["_id"] for d in corpus}
    keep: set[str] = set()
    for query in sorted(relevant):
        ranked = sorted((pair for pair in relevant[query] if pair[1] in known),
                        key=lambda pair: (-pair[0], _key(pair[1])))
        keep.update(doc for _, doc in ranked[:per_query])
    for d in sorted(corpus, key=lambda d: _key(d["_id"])):
        if len(keep) >= docs:
            break
        keep.add(d["_id"])
    kept_queries = [q for q in queries
                    if any(g > 0 and d in keep for g, d in relevant.get(q["_id"], []))]
    ids = {q["_id"] for q in kept_queries}
    out.mkdir(parents=True, exist_ok=True)
    (out / "qrels").mkdir(exist_ok=True)
    with (out / "corpus.jsonl").open("w") as f:
        for d in corpus:
            if d["_id"] in keep:
                f.write(json.dumps({"_id": d["_id"], "title": d.get("title", ""),
                                    "text": d["text"]}, ensure_ascii=False) + "\n")
    with (out / "queries.jsonl").open("w") as f:
        for q in kept_queries:
            f.write(json.dumps({"_id": q["_id"], "text": q["text"]}, ensure_ascii=False) + "\n")
    with (out / "qrels" / "test.tsv").open("w") as f:
        f.write("query-id\tcorpus-id\tscore\n")
        for query, doc, grade in qrels:
            if query in ids and doc in keep:
                f.write(f"{query}\t{doc}\t{grade}\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("source", type=Path)
    parser.add_argument("out", type=Path)
    parser.add_argument("--docs", type=int, default=1200)
    parser.add_argument("--per-query", type=int, default=12)
    args = parser.parse_args()
    subset(args.source, args.out, docs=args.docs, per_query=args.per_query)


if __name__ == "__main__":
    main()
