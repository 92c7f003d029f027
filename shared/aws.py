"""boto3 clients built from settings, with timeouts that fail fast instead of hanging."""

from __future__ import annotations

from typing import Any

import boto3
from botocore.config import Config


def client(service: str, *, endpoint_url: str | None, region: str,
           read_timeout: float = 30, retries: int = 3,
           credentials: tuple[str, str] | None = None) -> Any:
    """``credentials`` (key id, secret) override the environment's, e.g. moto's dummy keys."""
    config = Config(
        connect_timeout=3,
        read_timeout=read_timeout,
        retries={"max_attempts": retries, "mode": "standard"},
        max_pool_connections=32,
        # moto and other S3-compatible servers on a bare host:port need path-style addressing.
        s3={"addressing_style": "path"},
    )
    keys = {"aws_access_key_id": credentials[0], "aws_secret_access_key": credentials[1]} \
        if credentials else {}
    return boto3.client(service, endpoint_url=endpoint_url, region_name=region, config=config,
                        **keys)
