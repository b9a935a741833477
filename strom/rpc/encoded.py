"""Responses encoded by hand around their large bytes fields.

A FetchLog answer is mostly record batches read from segment files. Putting them into a protobuf
message and serializing it copies every byte twice more; instead the handler encodes the small parts
with protobuf and frames the record bytes itself (a length-delimited field may come after the others:
protobuf parsers accept fields in any order), and the RPC server writes the pieces to the socket as
they are.
"""

from __future__ import annotations

from dataclasses import dataclass, field

Buffer = bytes | bytearray | memoryview

_LENGTH_DELIMITED = 2
# pieces smaller than this are joined with their neighbours before they reach the transport
_SMALL = 4096


def varint(value: int) -> bytes:
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def field_header(number: int, length: int) -> bytes:
    """The tag and length of a length-delimited field (bytes, string or embedded message)."""
    return varint(number << 3 | _LENGTH_DELIMITED) + varint(length)


@dataclass
class EncodedResponse:
    """A response body as pieces in wire order; `size` is their total length."""

    chunks: list[Buffer] = field(default_factory=list)
    size: int = 0

    def add(self, piece: Buffer) -> None:
        length = memoryview(piece).nbytes
        if not length:
            return
        if length < _SMALL and self.chunks and isinstance(self.chunks[-1], bytearray):
            self.chunks[-1] += piece
        else:
            self.chunks.append(bytearray(piece) if length < _SMALL else piece)
        self.size += length

    def extend(self, other: EncodedResponse) -> None:
        for piece in other.chunks:
            self.add(piece)

    def embed(self, number: int, message: EncodedResponse) -> None:
        """Append `message` as length-delimited field `number` of this one."""
        self.add(field_header(number, message.size))
        self.extend(message)

    def to_bytes(self) -> bytes:
        return b"".join(bytes(c) for c in self.chunks)
