"""The SQS ingest queue and its dead-letter queue, as the gateway and the worker use them."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import orjson

from shared import aws
from shared.settings import CommonSettings

# Message attribute carrying why a message was dead-lettered by us (not by maxReceiveCount).
DLQ_REASON = "dlq_reason"


@dataclass(frozen=True)
class Message:
    message_id: str
    receipt_handle: str
    body: str
    receive_count: int
    attributes: dict[str, str] = field(default_factory=dict)


class Queue:
    def __init__(self, sqs: Any, url: str, dlq_url: str = "") -> None:
        self.sqs = sqs
        self.url = url
        self.dlq_url = dlq_url

    def send(self, body: str, attributes: dict[str, str] | None = None, *, url: str | None = None) -> str:
        kwargs: dict[str, Any] = {"QueueUrl": url or self.url, "MessageBody": body}
        if attributes:
            kwargs["MessageAttributes"] = {
                k: {"DataType": "String", "StringValue": v} for k, v in attributes.items()}
        return self.sqs.send_message(**kwargs)["MessageId"]

    def receive(self, max_messages: int, wait_s: int, visibility_s: int | None = None) -> list[Message]:
        kwargs: dict[str, Any] = {
            "QueueUrl": self.url,
            "MaxNumberOfMessages": max(1, min(10, max_messages)),
            "WaitTimeSeconds": wait_s,
            "AttributeNames": ["ApproximateReceiveCount"],
            "MessageAttributeNames": ["All"],
        }
        if visibility_s is not None:
            kwargs["VisibilityTimeout"] = visibility_s
        response = self.sqs.receive_message(**kwargs)
        return [_message(m) for m in response.get("Messages", [])]

    def delete(self, receipt_handle: str) -> None:
        self.sqs.delete_message(QueueUrl=self.url, ReceiptHandle=receipt_handle)

    def delete_batch(self, receipts: list[str]) -> list[str]:
        """Delete up to ten messages in one call; return the receipts SQS refused."""
        response = self.sqs.delete_message_batch(QueueUrl=self.url, Entries=[
            {"Id": str(i), "ReceiptHandle": r} for i, r in enumerate(receipts[:10])])
        return [receipts[int(f["Id"])] for f in response.get("Failed", [])]

    def change_visibility(self, receipt_handle: str, seconds: int) -> None:
        self.sqs.change_message_visibility(
            QueueUrl=self.url, ReceiptHandle=receipt_handle, VisibilityTimeout=seconds)

    def change_visibility_batch(self, receipts: list[str], seconds: int) -> list[str]:
        """Extend many messages in one call per ten; return the receipts SQS refused."""
        failed: list[str] = []
        for start in range(0, len(receipts), 10):
            batch = receipts[start:start + 10]
            response = self.sqs.change_message_visibility_batch(QueueUrl=self.url, Entries=[
                {"Id": str(i), "ReceiptHandle": r, "VisibilityTimeout": seconds}
                for i, r in enumerate(batch)])
            failed += [batch[int(f["Id"])] for f in response.get("Failed", [])]
        return failed

    def dead_letter(self, message: Message, reason: str) -> None:
        """Move a message that can never succeed to the DLQ with its reason, then delete it."""
        attributes = {**message.attributes, DLQ_REASON: reason[:1000]}
        self.send(message.body, attributes, url=self.dlq_url)
        self.delete(message.receipt_handle)

    def depth(self, *, url: str | None = None) -> dict[str, int]:
        attrs = self.sqs.get_queue_attributes(QueueUrl=url or self.url, AttributeNames=[
            "ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"])["Attributes"]
        return {"visible": int(attrs.get("ApproximateNumberOfMessages", 0)),
                "in_flight": int(attrs.get("ApproximateNumberOfMessagesNotVisible", 0))}


def _message(raw: dict[str, Any]) -> Message:
    attributes = {k: v.get("StringValue", "") for k, v in raw.get("MessageAttributes", {}).items()}
    return Message(
        message_id=raw["MessageId"],
        receipt_handle=raw["ReceiptHandle"],
        body=raw["Body"],
        receive_count=int(raw.get("Attributes", {}).get("ApproximateReceiveCount", 1)),
        attributes=attributes,
    )


def from_settings(settings: Any, *, read_timeout: float = 30) -> Queue:
    sqs = aws.client("sqs", endpoint_url=settings.aws_endpoint_url, region=settings.aws_region,
                     read_timeout=read_timeout)
    return Queue(sqs, settings.sqs_queue_url, settings.sqs_dlq_url)


def ensure_queues(sqs: Any, name: str, *, max_receive_count: int | None = None,
                  visibility_timeout_s: int = 60) -> tuple[str, str]:
    """Create the ingest queue and its DLQ with a redrive policy; idempotent. Returns the URLs.

    ``max_receive_count`` defaults to SQS_MAX_RECEIVE_COUNT's default: enough receives for a
    killed owner's message, a busy copy and a database outage before the DLQ (ADR 0075).
    An existing queue keeps its policy; change it with set-queue-attributes.
    """
    if max_receive_count is None:
        max_receive_count = CommonSettings.model_fields["sqs_max_receive_count"].default
    dlq_url = sqs.create_queue(QueueName=f"{name}-dlq", Attributes={
        "MessageRetentionPeriod": str(14 * 24 * 3600)})["QueueUrl"]
    dlq_arn = sqs.get_queue_attributes(
        QueueUrl=dlq_url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    url = sqs.create_queue(QueueName=name, Attributes={
        "VisibilityTimeout": str(visibility_timeout_s),
        "RedrivePolicy": orjson.dumps(
            {"deadLetterTargetArn": dlq_arn, "maxReceiveCount": str(max_receive_count)}).decode(),
    })["QueueUrl"]
    return url, dlq_url
