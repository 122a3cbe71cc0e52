"""``python -m rankopt``: the ``rankopt`` command."""

from rankopt.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
