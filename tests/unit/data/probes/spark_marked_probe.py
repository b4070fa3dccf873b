"""A Spark-marked test that starts nothing: run explicitly by tests/unit/test_class_archive.py to see what
the suite does when the class archive cannot be built (never collected by the suite itself)."""

import pytest


@pytest.mark.spark
def test_probe():
    pass
