"""The ``torchmt`` command of the Python package: runs the command-line tool installed with it."""

import os
import sys


def main() -> None:
    binary = os.path.join(os.path.dirname(os.path.abspath(__file__)), "bin", "torchmt")
    if not os.access(binary, os.X_OK):
        sys.exit(f"torchmt: the command-line tool is missing from the package ({binary}); reinstall torchmt")
    os.execv(binary, [binary] + sys.argv[1:])


if __name__ == "__main__":
    main()
