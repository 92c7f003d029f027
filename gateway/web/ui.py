"""Mount the web UI on the app: its router and its Jinja template engine, built at app creation."""

from __future__ import annotations

from pathlib import Path

from jinja2 import Environment, FileSystemLoader, StrictUndefined
from litestar import Router
from litestar.plugins.jinja import JinjaTemplateEngine
from litestar.template import TemplateConfig

from gateway import errors as api_errors
from gateway.web import assets, errorpages, format, pages

HERE = Path(__file__).parent


def mount() -> tuple[Router, TemplateConfig]:
    files = assets.Assets(HERE / "static")
    env = Environment(loader=FileSystemLoader(HERE / "templates"), autoescape=True,
                      undefined=StrictUndefined, trim_blocks=True, lstrip_blocks=True)
    env.filters.update(format.FILTERS)
    env.globals["asset"] = files.url
    # The run page hands these to static/runs.js, which redraws its stats live in the same words.
    env.globals["stat_labels"] = format.STAT_LABELS
    engine = JinjaTemplateEngine.from_environment(env)
    return pages.router(files), TemplateConfig(instance=engine)


# Unknown addresses: the HTML 404 page for browsers, JSON for the API (app.py registers it).
not_found = errorpages.unknown_address(pages.render, api_errors.http_error)
