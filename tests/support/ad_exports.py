"""Ad-platform daily exports as people download them (issue 13), generated for tests and the
bench: each platform's own header names, number formats and title/total lines."""

from __future__ import annotations

import codecs
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


# ── as the platforms' UIs download them (issue 20): for volume beside the real files ───────
META_DOWNLOAD = ["Reporting starts", "Reporting ends", "Campaign name", "Ad set name",
                 "Ad name", "Day", "Amount spent (EUR)", "Impressions", "Link clicks",
                 "Clicks (all)", "Results", "Result indicator"]


def meta_download(facts: Iterable[Fact], *, ids: bool = False) -> bytes:
    """Meta Ads Manager's CSV: UTF-8 with a BOM, every header quoted, the summary row first
    (names empty, the whole range), names only unless ``ids``; decimal point."""
    facts = list(facts)
    header = list(META_DOWNLOAD)
    if ids:
        header[3:3] = ["Campaign ID"]
        header[5:5] = ["Ad set ID"]
        header[7:7] = ["Ad ID"]
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n", quoting=csv.QUOTE_MINIMAL)
    out.write(",".join(f'"{h}"' for h in header) + "\n")
    first, last = min(f.day for f in facts), max(f.day for f in facts)
    total = sum(float(f.spend) for f in facts)
    summary = {"Reporting starts": first.isoformat(), "Reporting ends": last.isoformat(),
               "Amount spent (EUR)": f"{total:.2f}",
               "Impressions": str(sum(f.impressions for f in facts)), "Result indicator": "mixed"}
    writer.writerow([summary.get(h, "") for h in header])
    for f in facts:
        day = f.day.isoformat()
        cells = {"Reporting starts": day, "Reporting ends": day,
                 "Campaign name": f"Campaign {f.campaign}", "Campaign ID": f.campaign,
                 "Ad set name": f"Ad set {f.ad_set}", "Ad set ID": f.ad_set,
                 "Ad name": _name(f), "Ad ID": f.ad, "Day": day,
                 "Amount spent (EUR)": f.spend, "Impressions": str(f.impressions),
                 "Link clicks": str(f.clicks), "Clicks (all)": str(f.clicks + 3),
                 "Results": f.conversions,
                 "Result indicator": "actions:offsite_conversion.fb_pixel_purchase"}
        writer.writerow([cells[h] for h in header])
    return codecs.BOM_UTF8 + out.getvalue().encode()


def google_download(facts: Iterable[Fact], *, utf16: bool = True) -> bytes:
    """Google Ads' default "Excel CSV": UTF-16LE with a BOM, tab separated, the report's name
    and date range above the header, `--` for nothing, `Total:` rows at the end."""
    facts = list(facts)
    first, last = min(f.day for f in facts), max(f.day for f in facts)
    out = io.StringIO()
    out.write(f"Ad group report\n{first:%B} {first.day}, {first.year} - "
              f"{last:%B} {last.day}, {last.year}\n")
    writer = csv.writer(out, delimiter="\t" if utf16 else ",", lineterminator="\n")
    writer.writerow(["Ad group status", "Ad group", "Campaign", "Day", "Currency code", "Impr.",
                     "Clicks", "Cost", "Conversions", "Currency code"])
    for f in facts:
        writer.writerow(["Enabled", f"Ad set {f.ad_set}", f"Campaign {f.campaign}",
                         f.day.isoformat(), "USD", f"{f.impressions:,}", f"{f.clicks:,}",
                         _money(f.spend), f.conversions, "USD"])
    writer.writerow(["Total: Account", " --", " --", " --", "USD", "0", "0", "0.00", "0", "USD"])
    text = out.getvalue()
    return codecs.BOM_UTF16_LE + text.encode("utf-16-le") if utf16 else text.encode()
