"""Every gateway handler declares its parameters the way Litestar 3 reads them.

Litestar 2 infers a dependency from a bare `ctx: Context`, a request body from an unmarked
`data`, and a path or query parameter from a bare name, and warns that 3.0 drops all three (as it
drops `Parameter(query=...)`). It reads each handler's signature when the app is built, so
building the app with those warnings as errors fails on a handler written the old way; the
gateway under test runs as a subprocess, where pytest's own warning filters never reach.
"""

from __future__ import annotations

import warnings

from litestar.exceptions import LitestarDeprecationWarning

from gateway.app import create_app
from shared.settings import GatewaySettings


def test_building_the_gateway_relies_on_nothing_litestar_3_drops():
    settings = GatewaySettings(jwt_secret="k" * 48, metrics_token="m" * 24,
                               database_url="postgresql://nobody@127.0.0.1:1/none")
    with warnings.catch_warnings():
        warnings.simplefilter("error", LitestarDeprecationWarning)
        warnings.filterwarnings("error", message="Deprecated '(query|header|cookie)' parameter",
                                category=DeprecationWarning)
        app = create_app(settings)
    # The app really read every handler: the API and the pages are all routed.
    paths = {route.path for route in app.routes}
    assert {"/v1/ingestion-runs/{run_id:uuid}", "/v1/events", "/runs"} <= paths
