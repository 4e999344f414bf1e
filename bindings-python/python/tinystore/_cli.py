"""The ``tinystore`` command of the wheel: the core's command, run in this
process by the native module (``tinystore status data``, ``tinystore serve
data``, ``tinystore --version``; ``tinystore --help`` lists them)."""

from __future__ import annotations

import sys

from . import _native


def main() -> None:
    """Runs ``tinystore`` with this process's arguments and exits with its status."""
    sys.stdout.flush()
    sys.exit(_native.cli(["tinystore", *sys.argv[1:]]))


if __name__ == "__main__":
    main()
