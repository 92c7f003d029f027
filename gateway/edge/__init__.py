"""The gateway's edge: what every request meets before (or instead of) a route handler.

- ``json_depth``: every JSON body the gateway reads is at most MAX_DEPTH levels deep (ADR 0201).
- ``methods``: OPTIONS answers without a token, and its Allow lists every method of the path.
- ``transport``: HSTS where the connection is HTTPS, and the server's limits on slow or
  numerous clients (header-read timeout, minimum body rate, connections per process; ADR 0203).
"""
