"""The soak's inputs, made from a seed: documents of real text, records files and events.

Document text is real prose found on every machine that runs the project (the Python
language reference and standard library docstrings, tests/support/corpus.py), cut into
paragraphs; each document also carries one marker word of its own, so a search for it says
whether exactly that version is served. Records files use key spaces of their own per file
(case numbers ``IM-<file>-<row>``, addresses ``<row> File<file> Street``, campaign ids
``5<file>``), so what a batch promoted can be counted against the file it came from.
Names, e-mails and phones are personal data: the soak keeps every one it sent, and the log
check looks for each of them.
"""

from __future__ import annotations

import csv
import io
import random
import re
import warnings
from dataclasses import dataclass, field
from datetime import date, timedelta
from decimal import Decimal

from tests.support import ad_exports, corpus, documents

FIRST = ("Marguerite", "Oluwaseun", "Thaddeus", "Ingrid", "Rosalind", "Bartholomew", "Svetlana",
         "Leopold", "Anneliese", "Cornelius", "Philippa", "Evander", "Octavia", "Percival",
         "Genevieve", "Ignatius", "Wilhelmina", "Florian", "Henrietta", "Casimir")
LAST = ("Okonkwo-Vance", "Villanueva", "Thistlewood", "Abernathy", "Krasinski", "Quennell",
        "Haverbrook", "Lindqvist", "Marchetti", "Oyelaran", "Pemberton", "Szczepanski",
        "Wetherell", "Yarborough", "Zielinski", "Fairweather", "Castellanos", "Drummond")
COMPANIES = ("Acme Collections LLC", "Harbour Recovery Inc.", "Northgate Capital Corp",
             "Summit Receivables Co", "Bluewater Credit Ltd")
JUDGMENTS_HEADER = ["File #", "Plaintiff", "Defendant", "Amount", "Entry Date", "Court", "County"]
PLAINTIFFS_HEADER = ["File #", "Plaintiff", "Address", "City", "State", "ZIP", "Phone", "Email",
                     "Contact Person", "Status"]


def paragraphs(limit: int = 3000) -> list[str]:
    """Real paragraphs of 30-150 words, ASCII only (the PDF generator's core font)."""
    out: list[str] = []
    with warnings.catch_warnings():  # ast.parse of old stdlib files warns of "\\(" escapes
        warnings.simplefilter("ignore", DeprecationWarning)
        for text in corpus.python_paragraphs():
            words = text.split()
            if 30 <= len(words) <= 150 and text.isascii():
                out.append(" ".join(words))
            if len(out) >= limit:
                break
    return out


@dataclass
class Doc:
    name: str
    body: bytes
    marker: str
    good: bool  # False: a file that can never be processed (its failure is the file's)


class Documents:
    def __init__(self, rng: random.Random, texts: list[str]) -> None:
        self.rng = rng
        self.texts = texts
        self.n = 0

    def marker(self) -> str:
        self.n += 1
        return f"soakmark{self.n:05d}{self.rng.randrange(16**6):06x}"

    def _prose(self, k: int) -> list[str]:
        return self.rng.sample(self.texts, k)

    def text(self) -> Doc:
        mark = self.marker()
        parts = self._prose(self.rng.randint(2, 5))
        title = " ".join(parts[0].split()[:6])
        body = f"# {title}\n\n" + "\n\n".join(parts) + f"\n\nReference {mark}.\n"
        return Doc(f"{mark}.md", body.encode(), mark, True)

    def pdf(self) -> Doc:
        mark = self.marker()
        pages = [*self._prose(self.rng.randint(1, 3)), f"Reference {mark}."]
        return Doc(f"{mark}.pdf", documents.make_pdf(pages), mark, True)

    def docx(self) -> Doc:
        mark = self.marker()
        parts = self._prose(self.rng.randint(2, 4))
        table = [["Key", "Value"], ["reference", mark], ["pages", str(len(parts))]]
        body = documents.make_docx(" ".join(parts[0].split()[:5]), parts, table,
                                   bullets=(f"Reference {mark}",))
        return Doc(f"{mark}.docx", body, mark, True)

    def bad(self) -> Doc:
        """A PDF whose body is noise (mangled in transit: a truncated one may still be read),
        or one behind a password: the file's fault, never retryable."""
        mark = self.marker()
        if self.rng.random() < 0.5:
            noise = bytes(self.rng.randrange(256) for _ in range(4000))
            return Doc(f"{mark}-mangled.pdf", b"%PDF-1.7\n" + noise, mark, False)
        return Doc(f"{mark}-locked.pdf",
                   documents.make_encrypted_pdf(f"{self._prose(1)[0]} Reference {mark}."),
                   mark, False)

    def versioned(self, doc_no: int, version: int) -> Doc:
        mark = self.marker()
        body = (f"# Handbook {doc_no}\n\nVersion {version}.\n\n" + "\n\n".join(self._prose(2))
                + f"\n\nReference {mark}.\n")
        return Doc(f"handbook-{doc_no}.md", body.encode(), mark, True)


# ── records files ───────────────────────────────────────────────────────────────────────────
@dataclass
class RecordsFile:
    """One generated file and what promoting it must leave in the target tables."""

    no: int
    contract: str
    name: str
    body: bytes
    platform: str | None = None
    expect_fail: bool = False          # over the error budget: nothing may be promoted
    rows: int = 0                      # data rows written
    invalid: int = 0                   # rows the contract must refuse
    duplicates: int = 0                # rows repeating a key earlier in the file
    # What a completed or partial batch promoted, by key: judgments case → amount,
    # plaintiffs address line → name, ad metrics (campaign, ad set, ad, day) → spend.
    expected: dict[str, str] = field(default_factory=dict)
    personal: set[str] = field(default_factory=set)


class Records:
    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.n = 0
        self.cases: list[str] = []  # case numbers promoted files may have, for plaintiffs' links

    def _person(self) -> str:
        return f"{self.rng.choice(FIRST)} {self.rng.choice(LAST)}"

    def next(self, over_budget: bool) -> RecordsFile:
        self.n += 1
        kind = self.rng.choices(("judgments", "plaintiffs", "ad_metrics"), (4, 3, 3))[0]
        if kind == "plaintiffs" and not self.cases:
            kind = "judgments"
        f: RecordsFile = getattr(self, kind)(self.n, over_budget)
        # The worker's rule (worker/records/promote.check_budget): invalid % strictly above the
        # default threshold of 10 fails the batch, and nothing of it may be promoted.
        f.expect_fail = f.invalid * 100 > 10 * f.rows
        if f.contract == "judgments" and not f.expect_fail:
            self.cases.extend(list(f.expected)[:10])
        return f

    def judgments(self, no: int, over_budget: bool) -> RecordsFile:
        rows = self.rng.randint(20, 150)
        bad_share = 0.3 if over_budget else self.rng.choice((0.0, 0.0, 0.05))
        out = io.StringIO()
        writer = csv.writer(out, lineterminator="\n")
        writer.writerow(JUDGMENTS_HEADER)
        f = RecordsFile(no, "judgments", f"judgments-{no:04d}.csv", b"")
        day = date(2024, 1, 1) + timedelta(days=no % 300)
        for i in range(rows):
            case = f"IM-{no:04d}-{i:04d}"
            defendant = self._person()
            f.personal.add(defendant)
            if i and self.rng.random() < bad_share:
                writer.writerow([case, self.rng.choice(COMPANIES), defendant, "twelve dollars",
                                 day.strftime("%m/%d/%Y"), "New York Supreme Court", "New York"])
                f.invalid += 1
                continue
            cents = self.rng.randint(10_000, 5_000_000)
            writer.writerow([case, self.rng.choice(COMPANIES), defendant,
                             f"${cents // 100:,}.{cents % 100:02d}", day.strftime("%m/%d/%Y"),
                             "New York Supreme Court", "New York"])
            f.expected[case] = str(Decimal(cents).scaleb(-2))  # NUMERIC(12,2): '123.00'
            if i == 3 and not over_budget:  # a key repeated later in the same file
                writer.writerow([case.lower(), self.rng.choice(COMPANIES), defendant, "$1.00",
                                 day.strftime("%m/%d/%Y"), "New York Supreme Court", "New York"])
                f.duplicates += 1
        f.rows = rows + f.duplicates
        f.body = out.getvalue().encode()
        return f

    def plaintiffs(self, no: int, over_budget: bool) -> RecordsFile:
        rows = self.rng.randint(10, 80)
        bad_share = 0.3 if over_budget else self.rng.choice((0.0, 0.05))
        out = io.StringIO()
        writer = csv.writer(out, lineterminator="\n")
        writer.writerow(PLAINTIFFS_HEADER)
        f = RecordsFile(no, "plaintiffs", f"plaintiffs-{no:04d}.csv", b"")
        for i in range(rows):
            name = self._person()
            address = f"{i + 1} File{no:04d} Street"
            user = re.sub(r"[^a-z]", "", name.lower())
            email = f"{user}{no}@example.org"
            phone = f"(212) 555-{self.rng.randint(1000, 9999)}"
            f.personal |= {name, email, phone}
            zip_code = "1000x" if i and self.rng.random() < bad_share else f"{10001 + i % 90:05d}"
            writer.writerow([self.rng.choice(self.cases), name, address, "New York", "NY",
                             zip_code, phone, email, self._person(), "Active"])
            if zip_code.endswith("x"):
                f.invalid += 1
            else:
                f.expected[address] = name
        f.rows = rows
        f.body = out.getvalue().encode()
        return f

    def ad_metrics(self, no: int, over_budget: bool) -> RecordsFile:
        platform = self.rng.choice(("meta", "google", "tiktok"))
        bad_share = 0.3 if over_budget else 0.0
        campaign = f"5{no:05d}"
        facts: list[ad_exports.Fact] = []
        start = date(2026, 1, 1) + timedelta(days=no % 200)
        for ad_set in range(self.rng.randint(1, 3)):
            for ad in range(self.rng.randint(1, 3)):
                for day in range(self.rng.randint(2, 6)):
                    valid = not (facts and self.rng.random() < bad_share)
                    facts.append(ad_exports.Fact(
                        campaign, f"6{no:05d}{ad_set}", f"7{no:05d}{ad_set}{ad}",
                        start + timedelta(days=day), spend=f"{self.rng.randint(1, 900)}.25",
                        valid=valid))
        if platform == "google":  # ad-group rows: one per (ad set, day)
            seen: dict[tuple[str, date], ad_exports.Fact] = {}
            for fact in facts:
                seen.setdefault((fact.ad_set, fact.day), fact)
            facts = list(seen.values())
        f = RecordsFile(no, "ad_metrics", f"{platform}-{no:04d}.csv",
                        ad_exports.EXPORTS[platform](facts), platform=platform,
                        rows=len(facts))
        for fact in facts:
            if not fact.valid:
                f.invalid += 1
                continue
            ad_key = "" if platform == "google" else fact.ad
            f.expected[f"{fact.ad_set}|{ad_key}|{fact.day.isoformat()}"] = fact.spend
        return f


# ── ledger events ───────────────────────────────────────────────────────────────────────────
@dataclass
class Event:
    source_event_id: str
    sequence: int
    entity: str           # the judgment's case number
    body: dict            # what is sent
    poison: bool = False  # can never apply: must end dead-lettered with a reason


class Events:
    """Judgment events over a fixed set of entities, with a sequence that grows with each
    event made; the order they are sent in is the soak's choice, not the sequence's."""

    SOURCE = "soak-crm"

    def __init__(self, rng: random.Random, entities: int = 150) -> None:
        self.rng = rng
        self.entities = [f"EV-{i:05d}" for i in range(entities)]
        self.seq = 0

    def make(self) -> Event:
        self.seq += 1
        entity = self.rng.choice(self.entities)
        poison = self.rng.random() < 0.05
        amount = "a lot" if poison else f"{self.seq}.00"
        payload = {"File #": entity, "Plaintiff": self.rng.choice(COMPANIES),
                   "Defendant": f"{self.rng.choice(FIRST)} {self.rng.choice(LAST)}",
                   "Amount": amount, "Entry Date": "2024-03-01"}
        event_id = f"soak-{self.seq:07d}"
        body = {"source_system": self.SOURCE, "source_event_id": event_id,
                "source_sequence": self.seq, "type": "judgment.upserted", "payload": payload}
        return Event(event_id, self.seq, entity, body, poison)
