"""safe_filename: a user's file name becomes a storage key that cannot escape or confuse."""

from __future__ import annotations

import unicodedata

import pytest

from gateway.filenames import MAX_NAME_CHARS, safe_filename


def assert_safe(name: str) -> None:
    assert name and name not in (".", "..")
    assert "/" not in name and "\\" not in name
    assert not any(unicodedata.category(ch).startswith("C") for ch in name)
    assert len(name) <= MAX_NAME_CHARS
    assert not name.startswith((".", " ")) and not name.endswith((".", " "))


@pytest.mark.parametrize(("original", "expected"), [
    ("report.pdf", "report.pdf"),
    ("Board minutes 2024.md", "Board minutes 2024.md"),
    ("../../etc/passwd.txt", "passwd.txt"),
    ("/absolute/path/notes.txt", "notes.txt"),
    ("C:\\evil\\..\\x.md", "x.md"),
    ("..\\..\\windows\\system.ini.txt", "system.ini.txt"),
    ("re\x00port\x01.txt", "report.txt"),
    ("tab\there\nnewline.txt", "tabherenewline.txt"),
    ("a\u202egnp.txt", "agnp.txt"),  # right-to-left override would disguise the extension
    ("semi;colon&amp$.txt", "semi_colon_amp.txt"),
    ("ＦＵＬＬ.txt", "FULL.txt"),  # NFKC folds full-width letters
], ids=["plain", "spaces", "traversal", "absolute", "windows", "windows_traversal",
        "nul_and_control", "tab_newline", "bidi_override", "shell_chars", "fullwidth"])
def test_safe_filename(original, expected):
    assert safe_filename(original) == expected
    assert_safe(safe_filename(original))


@pytest.mark.parametrize("original", ["", ".", "..", "../", "/", "\x00\x01", "...", " . ",
                                      "..\\..\\", "???"])
def test_names_with_nothing_usable_fall_back_to_a_default(original):
    assert safe_filename(original) == "upload"


def test_hidden_file_keeps_its_name_without_the_leading_dot():
    assert safe_filename(".env.txt") == "env.txt"


def test_extension_only_name_gets_default_stem():
    assert safe_filename(".pdf") == "pdf"
    assert safe_filename("..pdf") == "pdf"


def test_long_name_is_cut_to_the_limit_and_keeps_its_extension():
    name = safe_filename("a" * 300 + ".docx")
    assert len(name) == MAX_NAME_CHARS and name.endswith(".docx")
    assert_safe(name)


def test_long_extension_is_cut():
    name = safe_filename("file." + "x" * 50)
    assert name == "file." + "x" * 16


def test_unicode_letters_are_replaced_not_dropped():
    # Non-ASCII letters become underscores: the stored name stays ASCII for every store.
    assert safe_filename("café menu.txt") == "caf_ menu.txt"
    # A stem with no ASCII left takes the default stem and keeps the extension.
    assert safe_filename("отчёт.pdf") == "upload.pdf"


def test_dots_inside_the_name_are_kept():
    assert safe_filename("a.b.c.tar.gz") == "a.b.c.tar.gz"
    assert safe_filename("v1..2.txt") == "v1..2.txt"


def test_custom_default_stem():
    assert safe_filename("../", default_stem="file") == "file"
