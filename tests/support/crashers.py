"""Files crafted to break a parser, for the tests that prove a worker survives them."""

from __future__ import annotations

import zlib


def make_pdf_bomb(inflated_mb: int) -> bytes:
    """A valid one-page PDF whose content stream inflates to ``inflated_mb`` MB (~1 MB on disk
    per GB). PDFium inflates the whole stream to read the page, so with the parser's memory
    limit below that size the PDF reader dies (it aborts on the failed allocation)."""
    content = zlib.compress(b"BT /F1 12 Tf 72 712 Td (bomb) Tj ET\n" + b" " * (inflated_mb << 20), 9)
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 4 0 R "
        b"/Resources << /Font << /F1 5 0 R >> >> >>",
        b"<< /Length %d /Filter /FlateDecode >>\nstream\n" % len(content) + content
        + b"\nendstream",
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
    ]
    out = bytearray(b"%PDF-1.4\n")
    offsets = []
    for number, body in enumerate(objects, 1):
        offsets.append(len(out))
        out += b"%d 0 obj\n" % number + body + b"\nendobj\n"
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    out += b"".join(b"%010d 00000 n \n" % offset for offset in offsets)
    out += b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (
        len(objects) + 1, xref)
    return bytes(out)
