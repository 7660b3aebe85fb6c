"""``python -m treeguardian ARGS`` runs the bundled guardian with ARGS."""

import os
import sys

from . import binary


def main() -> None:
    path = binary()
    os.execv(path, [path, *sys.argv[1:]])


if __name__ == "__main__":
    main()
