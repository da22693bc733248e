"""``python -m grpoflow.backends table``: print the side-by-side settings table of every registered backend.
``python -m grpoflow.backends settings NAME``: print the backend's own settings page (its folder's SETTINGS.md)."""

from __future__ import annotations

import sys

from grpoflow.backends import names, settings_page, settings_table

USAGE = "usage: python -m grpoflow.backends table | python -m grpoflow.backends settings NAME"


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv == ["table"]:
        sys.stdout.write(settings_table())
        return 0
    if len(argv) == 2 and argv[0] == "settings" and argv[1] in names():
        sys.stdout.write(settings_page(argv[1]))
        return 0
    print(USAGE + (f" (NAME: one of {', '.join(names())})" if argv[:1] == ["settings"] else ""), file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
