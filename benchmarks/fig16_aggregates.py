"""Paper figure group 'aggregates' only: `bench_promising.py --only aggregates` (same options)."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from bench_promising import main  # noqa: E402

if __name__ == "__main__":
    main(["--only", "aggregates", *sys.argv[1:]])
