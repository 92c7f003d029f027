"""Turn a user's filename into one that is safe to use as a storage key."""

from __future__ import annotations

import re
import unicodedata

MAX_NAME_CHARS = 120
_UNSAFE = re.compile(r"[^A-Za-z0-9._ -]+")


def safe_filename(original: str, default_stem: str = "upload") -> str:
    """A name with no path, no control characters and no traversal, keeping the extension.

    The original stays in the run's config for display; this one only names the stored object.
    """
    name = original.replace("\\", "/").rsplit("/", 1)[-1]
    name = unicodedata.normalize("NFKC", name)
    name = "".join(ch for ch in name if unicodedata.category(ch)[0] != "C")
    name = _UNSAFE.sub("_", name).strip(" .")
    stem, dot, ext = name.rpartition(".")
    if not dot:
        stem, ext = name, ""
    ext = ext[:16]
    stem = stem.strip(" ._")[: MAX_NAME_CHARS - len(ext) - 1] or default_stem
    return f"{stem}.{ext}" if ext else stem
