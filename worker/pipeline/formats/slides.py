"""PPTX: one page per slide; its title as a heading, text as paragraphs and lists, tables as
Markdown tables, speaker notes under their own heading. A chunk's page is its slide number."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pptx
from pptx.enum.shapes import MSO_SHAPE_TYPE, PP_PLACEHOLDER

from worker.pipeline.formats import common, office

_FIX = "open it in PowerPoint or LibreOffice Impress, save it as .pptx and upload it again."
_TITLES = (PP_PLACEHOLDER.TITLE, PP_PLACEHOLDER.CENTER_TITLE, PP_PLACEHOLDER.VERTICAL_TITLE)
_MAX_GROUP_DEPTH = 16


def read(path: Path, limits: common.Limits) -> common.Doc:
    office.refuse_encrypted(path, "PPTX")
    common.check_zip(path, "PPTX", "ppt/presentation.xml", limits, _FIX)
    try:
        presentation = pptx.Presentation(str(path))
        slides = list(presentation.slides)
        if len(slides) > limits.max_pages:
            raise common.too_large("PPTX", limits.max_pages, "slides")
        doc = common.Doc()
        for number, slide in enumerate(slides, start=1):
            doc.page()
            doc.add(*_slide(slide, number))
    except common.DocumentTooLarge:
        raise
    except Exception as exc:  # python-pptx raises lxml, KeyError, ValueError... on bad parts
        raise common.damaged("PPTX", _FIX) from exc
    return doc


def _slide(slide: Any, number: int) -> list[str]:
    title = ""
    blocks: list[str] = []
    for shape in _shapes(slide.shapes, 0):
        if shape.is_placeholder and shape.placeholder_format.type in _TITLES and not title:
            title = common.one_line(shape.text_frame.text) if shape.has_text_frame else ""
        elif getattr(shape, "has_table", False) and shape.has_table:
            blocks.append(common.table([[cell.text for cell in row.cells]
                                        for row in shape.table.rows]))
        elif shape.has_text_frame:
            blocks.extend(_paragraphs(shape.text_frame))
    heading = common.heading(2, f"Slide {number}: {title}" if title else f"Slide {number}")
    notes = _notes(slide)
    return [heading, *blocks, *([common.heading(3, "Notes"), *notes] if notes else [])]


def _shapes(shapes: Any, depth: int) -> Iterator[Any]:
    """Every shape, groups opened (to a bounded depth: a crafted file may nest them deeply)."""
    for shape in shapes:
        if shape.shape_type == MSO_SHAPE_TYPE.GROUP and depth < _MAX_GROUP_DEPTH:
            yield from _shapes(shape.shapes, depth + 1)
        else:
            yield shape


def _paragraphs(frame: Any) -> list[str]:
    blocks = []
    for paragraph in frame.paragraphs:
        text = common.one_line("".join(run.text for run in paragraph.runs) or paragraph.text)
        if not text:
            continue
        # Body placeholders show their paragraphs as bullets; a level above 0 is a sub-bullet.
        blocks.append("  " * paragraph.level + "- " + text if paragraph.level else text)
    return blocks


def _notes(slide: Any) -> list[str]:
    if not slide.has_notes_slide:
        return []
    frame = slide.notes_slide.notes_text_frame
    return _paragraphs(frame) if frame is not None else []
