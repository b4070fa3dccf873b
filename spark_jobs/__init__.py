"""Bundled PySpark streaming jobs and the job runtime."""
