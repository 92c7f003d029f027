"""Webhook endpoints of a tenant: register, list, delete, the delivery log, test events."""
