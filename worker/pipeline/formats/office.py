"""Password-protected office files, recognised before a reader calls them damaged.

Office 2007+ (DOCX, PPTX, XLSX) with a password to open is not a zip at all: the package is
encrypted inside an OLE compound file beside an `EncryptionInfo` stream (MS-OFFCRYPTO), which
readers took for a legacy .doc or a damaged file. OpenDocument keeps its zip but encrypts the
members its manifest lists with `encryption-data`. Either way the user needs one sentence:
a password protects the file (`encrypted_document`).
"""

from __future__ import annotations

import zipfile
from pathlib import Path

import olefile
from lxml import etree

from shared import errors
from worker.pipeline.formats import common, xml

_MANIFEST = "META-INF/manifest.xml"
_ODF_MANIFEST = "{urn:oasis:names:tc:opendocument:xmlns:manifest:1.0}"


def encrypted(kind: str) -> errors.EncryptedDocument:
    return errors.EncryptedDocument(
        f"extract: the {kind} is protected by a password, so its text cannot be read; open it, "
        "remove the password (save it without one) and upload it again.", stage=common.STAGE)


def refuse_encrypted(path: Path, kind: str) -> None:
    """Raise EncryptedDocument when ``path`` is a password-protected OOXML package."""
    if not common.is_ole(path):
        return
    try:
        with olefile.OleFileIO(str(path)) as ole:
            locked = ole.exists("EncryptedPackage") and ole.exists("EncryptionInfo")
    except (OSError, ValueError):  # olefile's own errors derive from these; then it is not ours
        return
    if locked:
        raise encrypted(kind)


def refuse_encrypted_odf(archive: zipfile.ZipFile, kind: str) -> None:
    """Raise EncryptedDocument when an OpenDocument package's manifest encrypts its members."""
    try:
        manifest = xml.parse(archive.read(_MANIFEST))
    except (KeyError, etree.XMLSyntaxError):
        return  # no readable manifest: the content itself will say whether it can be read
    if manifest.find(f".//{_ODF_MANIFEST}encryption-data") is not None:
        raise encrypted(kind)
