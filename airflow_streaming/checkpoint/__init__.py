"""Reading Spark Structured Streaming checkpoints (read-only)."""
