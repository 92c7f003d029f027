"""The web UI: server-rendered pages, our own static assets, and the cookie session.

Nothing here is imported by ``gateway/__init__``: ``gateway.web.ui.mount()`` builds it when the
app is created. ``session`` stays free of other gateway imports, because ``gateway.auth`` reads
the session cookie through it.
"""
