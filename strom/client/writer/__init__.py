"""Writing to log tables: append writers, and the batching machinery behind them.

The layout follows aiokafka's producer (and Fluss's WriterClient): `accumulator` batches per bucket,
`sender` is the background task that ships batches to leaders and retries, `idempotence` keeps writer
ids and batch sequences, `bucket_assigner` routes rows, and `append_writer` is the public face.
"""

from strom.client.writer.append_writer import AppendWriter, TableAppend
from strom.client.writer.errors import BufferExhaustedError, WriterClosedError
from strom.client.writer.write_result import WriteResult

__all__ = ["AppendWriter", "BufferExhaustedError", "TableAppend", "WriteResult", "WriterClosedError"]
