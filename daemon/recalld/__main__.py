"""``python -m recalld``: the ``recalld`` command (what the console script runs)."""

from recalld.surfaces.cli_fast import main

if __name__ == "__main__":
    raise SystemExit(main())
