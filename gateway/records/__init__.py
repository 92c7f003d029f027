"""Records read-back (issue 12 item 5): judgments, plaintiffs and duplicate candidates as the
records pipeline left them. Reads only; the worker owns these tables."""
