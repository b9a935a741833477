"""Parsing a request body into its protobuf message, leaving out the large fields a handler reads as
views of the body.

Protobuf's parse copies every bytes field; on the produce path that is a copy of every produced byte
which the handler never reads (it takes each bucket's records as a view of the body, see
wire_fields.py). For those APIs the parse sees a copy of the small rest of the body, with the large
fields present but empty.
"""

from __future__ import annotations

from google.protobuf.message import Message

from strom.rpc.api import ApiKey, ApiSpec
from strom.rpc.wire_fields import without_contents

# API -> the field-number path of the bytes fields its handler reads from the body itself
_VIEWED_FIELDS: dict[ApiKey, tuple[int, ...]] = {
    ApiKey.PRODUCE_LOG: (4, 3),  # ProduceLogRequest.buckets_req[].records
}


def parse_request(spec: ApiSpec, body: bytes | bytearray) -> Message:
    """The request message of `body`; raises protobuf's DecodeError as ParseFromString does."""
    request = spec.request_type()
    path = _VIEWED_FIELDS.get(spec.key)
    if path is not None:
        try:
            lean = without_contents(memoryview(body), path)
        except (ValueError, IndexError):
            pass  # malformed: the full parse below raises the error that says why
        else:
            request.ParseFromString(lean)
            return request
    request.ParseFromString(body)
    return request
