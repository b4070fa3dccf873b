"""Airflow provider for the lifecycle of Spark Structured Streaming jobs."""
__version__ = "0.1.0"
