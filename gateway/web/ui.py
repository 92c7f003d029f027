"""Mount the web UI on the app: its router and its Jinja template engine, built at app creation."""

from __future__ import annotations

from pathlib import Path

from jinja2 import Environment, FileSystemLoader, StrictUndefined
from litestar import Router
from litestar.plugins.jinja import JinjaTemplateEngine
from litestar.template import TemplateConfig

from gateway.web import assets, format, pages

HERE = Path(__file__).parent


def mount() -> tuple[Router, TemplateConfig]:
    files = assets.Assets(HERE / "static")
    env = Environment(loader=FileSystemLoader(HERE / "templates"), autoescape=True,
                      undefined=StrictUndefined, trim_blocks=True, lstrip_blocks=True)
    env.filters.update(format.FILTERS)
    env.globals["asset"] = files.url
    engine = JinjaTemplateEngine.from_environment(env)
    return pages.router(files), TemplateConfig(instance=engine)
