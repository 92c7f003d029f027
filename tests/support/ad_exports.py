"""Ad-platform daily exports as people download them (issue 13), generated for tests and the
bench: each platform's own header names, number formats and title/total lines."""

from __future__ import annotations

import csv
import io
from collections.abc import Iterable
from dataclasses import dataclass, replace
from datetime import date, timedelta

META_HEADER = ["Reporting starts", "Reporting ends", "Campaign name", "Campaign ID",
               "Ad set name", "Ad set ID", "Ad name", "Ad ID", "Day", "Amount spent (USD)",
               "Impressions", "Clicks (all)", "Results"]
GOOGLE_HEADER = ["Campaign", "Campaign ID", "Ad group", "Ad group ID", "Day", "Currency code",
                 "Cost", "Impr.", "Clicks", "Conversions"]
TIKTOK_HEADER = ["Campaign name", "Campaign ID", "Ad group name", "Ad group ID", "Ad name",
                 "Ad ID", "Date", "Cost", "Impressions", "Clicks", "Conversions"]


@dataclass(frozen=True)
class Fact:
    """One day of one ad (Google: of one ad group) and its figures."""

    campaign: str
    ad_set: str
    ad: str
    day: date
    spend: str = "12.34"
    impressions: int = 1000
    clicks: int = 25
    conversions: str = "2"
    ad_name: str | None = "auto"   # None: the export carries the ad's id but no name
    valid: bool = True             # False: an unreadable spend


def grid(campaigns: int, ad_sets: int, ads: int, days: int,
         start: date = date(2026, 1, 1)) -> list[Fact]:
    """``ads`` ads spread over ``ad_sets`` ad sets over ``campaigns`` campaigns, each ad with
    one row per day for ``days`` days."""
    facts = []
    for day in range(days):
        for ad in range(ads):
            ad_set = ad % ad_sets
            facts.append(Fact(f"9{ad_set % campaigns:04d}", f"8{ad_set:05d}", f"7{ad:06d}",
                              start + timedelta(days=day), spend=f"{(ad % 97) + day}.25"))
    return facts


def amend(facts: Iterable[Fact], every: int, spend: str) -> list[Fact]:
    return [replace(f, spend=spend) if i % every == 0 else f for i, f in enumerate(facts)]


def _money(value: str, symbol: str = "") -> str:
    whole, _, cents = value.partition(".")
    return f"{symbol}{int(whole):,}.{cents or '00'}"


def _name(fact: Fact) -> str:
    return "" if fact.ad_name is None else f"Ad {fact.ad}"


def meta(facts: Iterable[Fact]) -> bytes:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(META_HEADER)
    for f in facts:
        day = f.day.isoformat()
        writer.writerow([day, day, f"Campaign {f.campaign}", f.campaign, f"Ad set {f.ad_set}",
                         f.ad_set, _name(f), f.ad, day,
                         _money(f.spend) if f.valid else "n/a!", f"{f.impressions:,}",
                         f"{f.clicks:,}", f.conversions])
    return out.getvalue().encode()


def google(facts: Iterable[Fact]) -> bytes:
    """Google Ads: two title lines, ad-group rows (no ads), `--` for nothing, a total row."""
    out = io.StringIO()
    out.write("Ad group report\n\"January 1, 2026 - January 31, 2026\"\n")
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(GOOGLE_HEADER)
    for f in facts:
        writer.writerow([f"Campaign {f.campaign}", f.campaign, f"Ad set {f.ad_set}", f.ad_set,
                         f.day.isoformat(), "USD", _money(f.spend) if f.valid else "n/a!",
                         f"{f.impressions:,}", f"{f.clicks:,}", f.conversions])
    writer.writerow(["Total: Account", "--", "--", "--", "--", "USD", "0.00", "0", "0", "0"])
    return out.getvalue().encode()


def tiktok(facts: Iterable[Fact]) -> bytes:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(TIKTOK_HEADER)
    for f in facts:
        writer.writerow([f"Campaign {f.campaign}", f.campaign, f"Ad set {f.ad_set}", f.ad_set,
                         _name(f), f.ad, f"{f.day.isoformat()} 00:00:00",
                         f.spend if f.valid else "n/a!", f.impressions, f.clicks,
                         f.conversions])
    return out.getvalue().encode()


EXPORTS = {"meta": meta, "google": google, "tiktok": tiktok}
