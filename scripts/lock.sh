#!/usr/bin/env bash
# Regenerate the two constraint files from pyproject.toml (needs uv 0.6.7+ for --group):
#   constraints.txt         the newest tested set (every extra and the `test` dependency group);
#                           scripts/setup_env.sh and the Docker image install it.
#                           Existing pins are kept unless pyproject.toml forces a change (uv reuses the
#                           versions already in the output file); to move one: scripts/lock.sh --upgrade-package NAME
#   constraints-lowest.txt  the lowest set pyproject.toml allows (uv --resolution lowest-direct: every direct
#                           dependency at its lower bound, the rest at their newest); scripts/test_lowest.sh runs it.
# Both are checked: pyspark and pyspark-client must have the same version (they share site-packages/pyspark).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
PYVER="${PYVER:-3.11}"

# Airflow 3.1.0 declares structlog>=25.4.0 without an upper bound but imports structlog.dev.Styles, which
# 25.5.0 and 26.x do not have ("cannot import name 'Styles' from 'structlog.dev'"): pin the version it was
# released with (what Airflow's own constraints file does).
lowest_overrides="$(mktemp)"
trap 'rm -f "$lowest_overrides"' EXIT
echo "structlog==25.4.0" >"$lowest_overrides"

uv pip compile pyproject.toml --all-extras --group pyproject.toml:test --python-version "$PYVER" \
  --no-emit-package airflow-streaming \
  --custom-compile-command "scripts/lock.sh" -o constraints.txt -q "$@"
uv pip compile pyproject.toml --extra pyspark --group pyproject.toml:test --python-version "$PYVER" \
  --no-emit-package airflow-streaming \
  --resolution lowest-direct -c "$lowest_overrides" --no-annotate \
  --custom-compile-command "scripts/lock.sh" -o constraints-lowest.txt -q

for file in constraints.txt constraints-lowest.txt; do
  spark="$(sed -n 's/^pyspark==//p' "$file")"
  client="$(sed -n 's/^pyspark-client==//p' "$file")"
  if [ "$spark" != "$client" ]; then
    echo "ERROR: $file pins pyspark $spark but pyspark-client $client: they must be the same version" >&2
    echo "       (pin both in pyproject.toml or pass --upgrade-package for both)" >&2
    exit 1
  fi
  echo "$file: $(grep -c '==' "$file") packages, pyspark $spark, apache-airflow $(sed -n 's/^apache-airflow==//p' "$file")"
done
