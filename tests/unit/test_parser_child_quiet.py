"""A parser child whose worker is gone (SIGTERM, kill -9) ends quietly: it had nobody to answer,
and a raw traceback on the stack's stderr bypasses the JSON logs and their redaction. Found by
the chaos soak (issue 24): `Process extract: … BrokenPipeError` after a worker's SIGTERM."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

CHILD = """
import multiprocessing, sys
from worker.pipeline import parsers
receiver, sender = multiprocessing.Pipe(duplex=False)
receiver.close()  # the worker is gone: nobody reads the answer
parsers._child(sender, sys.argv[1], "md", 10**8, 2**31)
"""


def test_a_parser_child_whose_worker_is_gone_exits_without_a_traceback(tmp_path):
    doc = tmp_path / "doc.md"
    doc.write_text("# Title\n\nSome words to extract.\n")
    done = subprocess.run([sys.executable, "-c", CHILD, str(doc)], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr, done.stderr
