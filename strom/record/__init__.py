"""Fluss record formats: log batches (header, CRC-32C, Arrow payload), KV batches, rows and keys."""
