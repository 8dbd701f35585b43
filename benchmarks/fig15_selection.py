"""Paper figure group 'selection' only: `bench_promising.py --only selection` (same options)."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from bench_promising import main  # noqa: E402

if __name__ == "__main__":
    main(["--only", "selection", *sys.argv[1:]])
