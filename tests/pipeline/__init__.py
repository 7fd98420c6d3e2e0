"""PySpark source and reference pipeline tests (real Spark local[2], real broker)."""
