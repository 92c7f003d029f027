"""Event intake (DESIGN.md "Event ledger"): API keys, POST /v1/events through each gateway's
writer, and the producer's reconnect cursor. The worker applies the ledger's pending rows."""
