"""Webhook delivery: the dispatcher thread of `ingest worker` (docs/decisions/0154)."""
