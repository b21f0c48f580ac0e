"""The ``dlrs`` console script: the Rust command of ``dataloader_rs._native.cli_main``."""

from __future__ import annotations

import os
import sys

from dataloader_rs import _native


def main() -> None:
    """Runs ``dlrs`` with this process's arguments and exits with its status.

    ``dlrs parity`` runs its Pillow side in ``$DLRS_PYTHON``: this interpreter unless it is set.
    """
    os.environ.setdefault("DLRS_PYTHON", sys.executable)
    try:
        status = _native.cli_main(sys.argv)
    except KeyboardInterrupt:
        sys.exit(130)
    sys.exit(status)


if __name__ == "__main__":
    main()
