"""Airflow provider for the lifecycle of Spark Structured Streaming jobs."""

# The package's version: its only source. pyproject.toml reads it (dynamic version) and the provider info
# reports it; CHANGELOG.md names it. Change it here when releasing.
__version__ = "0.1.0"
