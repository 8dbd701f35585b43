"""Paper figure group 'join' only: `bench_promising.py --only join` (same options)."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from bench_promising import main  # noqa: E402

if __name__ == "__main__":
    main(["--only", "join", *sys.argv[1:]])
