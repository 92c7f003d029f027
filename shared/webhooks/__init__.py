"""Webhooks shared by the gateway (registration, test events) and the worker (delivery):
the URL rule and Standard Webhooks signing (docs/decisions/0153-0154)."""
