"""spark-submit entry point of every managed stream: ``spark-submit ... spark_jobs/launch.py <runtime args>``."""

import os
import sys

# Make the project importable in the driver when it is not installed (e.g. shipped with --py-files).
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from spark_jobs.runtime.launcher import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
