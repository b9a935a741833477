"""Reading primary-key tables by key: lookupers, prefix lookupers, and the batching behind them.

`lookuper` is the public face, `lookup_client` batches the lookups of a connection per leader, and
`value_decoder` turns stored values (schema id + CompactedRow) into dicts or Arrow.
"""

from strom.client.lookup.lookuper import Lookuper, PrefixLookuper, TableLookup, TablePrefixLookup
from strom.client.lookup.value_decoder import ValueDecoder

__all__ = ["Lookuper", "PrefixLookuper", "TableLookup", "TablePrefixLookup", "ValueDecoder"]
