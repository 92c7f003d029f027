"""Search and cited answers over what the workers ingested (issue 15 §1–2).

- ``service``: hybrid search (full text + vectors, fused by reciprocal rank), tenant-scoped,
  active versions only; its SQL is ``queries.sql``.
- ``embedding``: the query embedder, loaded once per process on first use, off the event loop.
- ``answer``: ``POST /v1/ask``, extractive or from an LLM provider (``provider``), citing only
  retrieved chunks of active versions.
- ``routes``: the HTTP layer.
"""
