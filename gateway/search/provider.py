"""The Anthropic Messages API as an answer writer: given numbered passages, an answer citing them.

Plain httpx (POST {base}/v1/messages), retried with tenacity on transport errors, 429, 5xx and
529 (overloaded), each attempt bounded by a timeout. Every failure raises ProviderFailed, which
the caller answers with the extractive answer instead (fail-open, docs/decisions/0107). The key
travels only in the x-api-key header and is never logged.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import httpx
from tenacity import AsyncRetrying, retry_if_exception, stop_after_attempt, wait_exponential_jitter

from shared.settings import GatewaySettings

API_VERSION = "2023-06-01"
MAX_TOKENS = 700
NO_EVIDENCE = "NO_EVIDENCE"
_RETRY_STATUSES = {408, 429, 500, 502, 503, 504, 529}
_CITATION = re.compile(r"\[(\d{1,3})\]")
SYSTEM = (
    "You answer questions using only the numbered passages from the user's own documents. "
    "Cite every claim with the passage number in square brackets, like [1] or [2][3]. "
    "Do not use outside knowledge. If the passages do not answer the question, reply with "
    f"exactly {NO_EVIDENCE} and nothing else. Answer in the question's language, briefly.")


class ProviderFailed(Exception):
    """The provider could not give an answer (unreachable, refused, malformed reply)."""


class _Retryable(Exception):
    pass


@dataclass(frozen=True)
class Reply:
    text: str
    cited: list[int]  # passage numbers, from 1, in order of first citation
    no_evidence: bool


def prompt(question: str, passages: Sequence[str]) -> str:
    numbered = "\n\n".join(f"[{n}] {text}" for n, text in enumerate(passages, start=1))
    return f"Passages:\n\n{numbered}\n\nQuestion: {question}"


def parse(text: str, passage_count: int) -> Reply:
    """The reply's citations, keeping only numbers that name a passage we sent."""
    if text.strip() == NO_EVIDENCE:
        return Reply(text, [], True)
    cited: list[int] = []
    for match in _CITATION.finditer(text):
        n = int(match.group(1))
        if 1 <= n <= passage_count and n not in cited:
            cited.append(n)
    return Reply(text.strip(), cited, False)


async def answer(settings: GatewaySettings, question: str, passages: Sequence[str]) -> Reply:
    body = {"model": settings.anthropic_model, "max_tokens": MAX_TOKENS, "system": SYSTEM,
            "messages": [{"role": "user", "content": prompt(question, passages)}]}
    headers = {"x-api-key": settings.anthropic_api_key, "anthropic-version": API_VERSION,
               "content-type": "application/json"}
    url = settings.anthropic_base_url.rstrip("/") + "/v1/messages"
    try:
        async with httpx.AsyncClient(timeout=settings.anthropic_timeout_s) as client:
            async for attempt in AsyncRetrying(
                    stop=stop_after_attempt(settings.anthropic_max_attempts),
                    wait=wait_exponential_jitter(initial=0.2, max=4),
                    retry=retry_if_exception(lambda e: isinstance(e, (_Retryable, httpx.TransportError))),
                    reraise=True):
                with attempt:
                    response = await client.post(url, json=body, headers=headers)
                    if response.status_code in _RETRY_STATUSES:
                        raise _Retryable(f"status {response.status_code}")
                    if response.status_code != 200:
                        raise ProviderFailed(f"the provider refused: status {response.status_code}")
                    return parse(_text(response.json()), len(passages))
    except ProviderFailed:
        raise
    except (_Retryable, httpx.HTTPError, ValueError) as exc:
        raise ProviderFailed(f"{type(exc).__name__}: {exc}") from exc
    raise ProviderFailed("no attempt was made")  # unreachable: stop allows at least one


def _text(payload: Any) -> str:
    try:
        parts = [block["text"] for block in payload["content"] if block.get("type") == "text"]
    except (KeyError, TypeError) as exc:
        raise ProviderFailed("the provider's reply has no content blocks") from exc
    if not parts or not "".join(parts).strip():
        raise ProviderFailed("the provider's reply is empty")
    return "".join(parts)
