"""Images (PNG, JPEG, TIFF with all its pages, WebP): OCR, one page per frame.

A damaged image is the user's file, never our error: Pillow raises whatever its decoder meets
(OSError, SyntaxError, KeyError for a JPEG whose first bytes are gone, TypeError or RuntimeError
for a TIFF cut short), so every failure to open or decode becomes `extraction_error` naming the
page, with what to do (issue 33 found both as `unexpected_error`, "retry the run").
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from PIL import Image, ImageOps

from shared import errors
from worker.pipeline.formats import common, ocr

_FORMATS = {"png": ("PNG",), "jpeg": ("JPEG", "MPO"), "tiff": ("TIFF",), "webp": ("WEBP",)}
_FIX = "check that it opens in an image viewer (a file cut short in transfer does not), " \
       "then upload it again."


def read(path: Path, source_type: str, limits: common.Limits,
         on_ocr: Callable[[int], None],
         on_page: Callable[[], None] = lambda: None) -> common.Doc:
    kind = f"{source_type.upper()} image"
    # Pillow's own bomb guard, at our limit: past it Image.open raises instead of decoding.
    Image.MAX_IMAGE_PIXELS = limits.max_image_pixels
    try:
        image = Image.open(path, formats=_FORMATS[source_type])
        frames = getattr(image, "n_frames", 1)  # a TIFF walks its page chain here
    except Image.DecompressionBombError as exc:
        raise common.too_large("image", limits.max_image_pixels, "pixels") from exc
    except (OSError, ValueError) as exc:
        raise common.not_a(kind, _FIX) from exc
    except Exception as exc:  # noqa: BLE001 - any decoder failure is a damaged file
        raise common.damaged(kind, _FIX) from exc
    with image:
        if frames > min(limits.max_pages, limits.max_ocr_pages):
            raise common.too_large("image", min(limits.max_pages, limits.max_ocr_pages), "pages")
        on_ocr(frames)
        doc = common.Doc()
        with ocr.engine() as api:
            for index in range(frames):
                page = _frame(image, index, frames, kind, limits)
                doc.page()
                doc.add(ocr.read_image(api, page))
                on_page()
    return doc


def _frame(image: Any, index: int, frames: int, kind: str, limits: common.Limits) -> Any:
    """Page ``index`` decoded, upright, in grey; a page that does not decode is named."""
    try:
        image.seek(index)
        if image.width * image.height > limits.max_image_pixels:
            raise common.too_large("image", limits.max_image_pixels, "pixels")
        return ImageOps.exif_transpose(image).convert("L")
    except errors.BadDocument:
        raise
    except Exception as exc:  # noqa: BLE001 - Pillow's decoders raise many kinds on bad data
        where = f"page {index + 1} of {frames} of the {kind}" if frames > 1 else f"the {kind}"
        raise errors.ExtractionError(
            f"extract: {where} is damaged or cut short and could not be decoded; {_FIX}",
            stage=common.STAGE) from exc
