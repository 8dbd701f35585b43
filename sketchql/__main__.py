"""``python -m sketchql ...``: the same command line as the ``sketchql`` script.

>>> import subprocess, sys
>>> subprocess.run([sys.executable, "-m", "sketchql", "--help"], capture_output=True).returncode
0
"""
import sys

from .cli import main

if __name__ == "__main__":
    sys.exit(main())
