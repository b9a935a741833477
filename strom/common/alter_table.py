"""Numbers AlterTableRequest carries, as Fluss defines them (both the client and the coordinator use them)."""

# PbAlterConfig.op_type (Fluss's AlterConfigOpType); APPEND (2) is for list-valued cluster options only
ALTER_CONFIG_SET = 0
ALTER_CONFIG_DELETE = 1
# PbAddColumn.column_position_type (Fluss's ColumnPositionType): only LAST exists
COLUMN_POSITION_LAST = 0
