"""Images (PNG, JPEG, TIFF with all its pages, WebP): OCR, one page per frame."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from PIL import Image, ImageOps, ImageSequence

from worker.pipeline.formats import common, ocr

_FORMATS = {"png": ("PNG",), "jpeg": ("JPEG", "MPO"), "tiff": ("TIFF",), "webp": ("WEBP",)}
_FIX = "check that it opens in an image viewer and upload it again."


def read(path: Path, source_type: str, limits: common.Limits,
         on_ocr: Callable[[int], None]) -> common.Doc:
    # Pillow's own bomb guard, at our limit: past it Image.open raises instead of decoding.
    Image.MAX_IMAGE_PIXELS = limits.max_image_pixels
    try:
        image = Image.open(path, formats=_FORMATS[source_type])
    except Image.DecompressionBombError as exc:
        raise common.too_large("image", limits.max_image_pixels, "pixels") from exc
    except (OSError, ValueError) as exc:
        raise common.not_a(source_type.upper() + " image", _FIX) from exc
    with image:
        frames = getattr(image, "n_frames", 1)
        if frames > min(limits.max_pages, limits.max_ocr_pages):
            raise common.too_large("image", min(limits.max_pages, limits.max_ocr_pages), "pages")
        on_ocr(frames)
        doc = common.Doc()
        with ocr.engine() as api:
            for frame in ImageSequence.Iterator(image):
                if frame.width * frame.height > limits.max_image_pixels:
                    raise common.too_large("image", limits.max_image_pixels, "pixels")
                try:
                    page = ImageOps.exif_transpose(frame).convert("L")
                except (OSError, ValueError) as exc:
                    raise common.damaged(f"{source_type.upper()} image", _FIX) from exc
                doc.page()
                doc.add(ocr.read_image(api, page))
    return doc
