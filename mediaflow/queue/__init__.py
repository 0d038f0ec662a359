"""Work-queue contract and backends."""
