"""``python -m grpoflow.backends table``: print docs/backends.md's side-by-side settings table."""

from __future__ import annotations

import sys

from grpoflow.backends import settings_table


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv != ["table"]:
        print("usage: python -m grpoflow.backends table", file=sys.stderr)
        return 2
    sys.stdout.write(settings_table())
    return 0


if __name__ == "__main__":
    sys.exit(main())
