#!/bin/sh
# python/run_tests.sh LIBMOEGEN -- CTest's python_tests: pytest on python/tests
# with this tree's package and the given libmoegen.so. Exit 77 (skipped),
# saying why, when python3, torch or pytest cannot be imported.
here=$(cd "$(dirname "$0")" && pwd)
py=${PYTHON:-python3}
command -v "$py" >/dev/null 2>&1 || { echo "SKIP: no $py on PATH"; exit 77; }
for mod in torch pytest; do
  "$py" -c "import $mod" 2>/dev/null || { echo "SKIP: $py cannot import $mod"; exit 77; }
done
MOEGEN_LIBRARY=$1 PYTHONPATH="$here${PYTHONPATH:+:$PYTHONPATH}" exec "$py" -m pytest -q -p no:cacheprovider "$here/tests"
