"""The records contracts, published: what a file must look like before anyone uploads it."""

from __future__ import annotations

from litestar import get
from litestar.params import FromPath

from gateway import openapi
from shared import contracts


@get("/v1/contracts", tags=["imports"])
async def list_contracts() -> dict:
    """Every contract a records file can be imported under."""
    return {"items": [{"name": c.name, "version": c.version, "description": c.description}
                      for c in contracts.CONTRACTS.values()]}


@get("/v1/contracts/{name:str}", tags=["imports"], responses=openapi.errors(404))
async def get_contract(name: FromPath[str]) -> dict:
    """One contract: columns with their accepted headers, rules with code, severity and
    message, the natural key, an example row and a sample CSV file; for ad_metrics the same
    for each platform's export under ``variants``."""
    return contracts.publish(contracts.get(name))


ROUTES = [list_contracts, get_contract]
