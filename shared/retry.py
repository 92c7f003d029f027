"""Retrying transient failures inside a job: exponential backoff with full jitter (tenacity).

Transient means the same call may succeed in a moment: a dropped connection, a deadlock, an S3
timeout or 5xx. Anything else is raised at once: retrying a bad document only wastes time.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Callable
from typing import TypeVar

from botocore.exceptions import (
    ClientError,
    ConnectionClosedError,
    ConnectTimeoutError,
    EndpointConnectionError,
    IncompleteReadError,
    ReadTimeoutError,
    ResponseStreamingError,
)
from tenacity import (
    before_sleep_log,
    retry,
    retry_if_exception,
    stop_after_attempt,
    wait_random_exponential,
)

from shared import db, errors

log = logging.getLogger(__name__)
T = TypeVar("T")

# The last two are a download cut off mid-body (a reset or a short read): reading again works.
_AWS_NETWORK = (EndpointConnectionError, ConnectTimeoutError, ReadTimeoutError,
                ConnectionClosedError, ResponseStreamingError, IncompleteReadError)
_AWS_TRANSIENT_CODES = {"RequestTimeout", "SlowDown", "InternalError", "ServiceUnavailable",
                        "ThrottlingException", "RequestTimeTooSkewed", "500", "503"}


def is_transient(exc: BaseException) -> bool:
    if db.is_retryable(exc) or isinstance(exc, (*_AWS_NETWORK, ConnectionError, TimeoutError,
                                                errors.StorageUnavailable)):
        return True
    if isinstance(exc, ClientError):
        return exc.response.get("Error", {}).get("Code") in _AWS_TRANSIENT_CODES
    return False


def transient(attempts: int = 4, max_wait_s: float = 8.0) -> Callable[[Callable[..., T]], Callable[..., T]]:
    """Decorate a call to retry it on transient errors, then re-raise the last one."""
    return retry(
        retry=retry_if_exception(is_transient),
        wait=wait_random_exponential(multiplier=0.25, max=max_wait_s),
        stop=stop_after_attempt(attempts),
        before_sleep=before_sleep_log(log, logging.WARNING),
        reraise=True,
    )


def full_jitter_s(attempt: int, base_s: float, cap_s: float) -> float:
    """The delay before retry number ``attempt`` (1 = the first) of a row that waits in a table
    (a ledger event, a webhook delivery): full jitter, uniform in [0, min(cap, base × 2^(n-1))]
    (AWS architecture blog, "Exponential Backoff And Jitter")."""
    return random.uniform(0, min(cap_s, base_s * 2 ** max(attempt - 1, 0)))
