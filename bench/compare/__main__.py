"""``python -m bench.compare [--quick]``: see bench/compare/run.py and docs/benchmarks-comparison.md."""

import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
VENV_PY = os.path.join(ROOT, ".venv", "bin", "python")

try:
    import psycopg  # noqa: F401
except ImportError:  # run with a python that lacks psycopg: use the project's virtualenv
    venv = os.path.realpath(os.path.join(ROOT, ".venv"))
    if os.path.exists(VENV_PY) and os.path.realpath(sys.prefix) != venv:
        os.execv(VENV_PY, [VENV_PY, "-m", "bench.compare", *sys.argv[1:]])
    raise

from bench.compare.run import main  # noqa: E402

main()
