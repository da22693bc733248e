"""A job's logging and its one-line failures, shared by every entry point (``grpoflow.workflow``'s jobs, each
backend's ``train`` module, ``python -m grpoflow.envcheck``): a ``GrpoflowError`` becomes a single
``grpoflow: error:`` line on stderr (and in the log) and exit status 1; any other exception is a bug: its
traceback goes to the log, a one-line pointer to stderr. Imports nothing of grpoflow but its error type."""

from __future__ import annotations

import logging
import os
import sys
import traceback
from typing import Any, Callable

from grpoflow.errors import GrpoflowError


def setup_logging(log_file: str | None = None, level: int = logging.INFO) -> None:
    """Log to ``log_file`` (the rule's log) and to stderr, once per process."""
    root = logging.getLogger()
    if getattr(root, "_grpoflow_configured", False):
        return
    fmt = logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s", "%H:%M:%S")
    handlers: list[logging.Handler] = [logging.StreamHandler(sys.stderr)]
    if log_file:
        os.makedirs(os.path.dirname(os.path.abspath(log_file)), exist_ok=True)
        handlers.append(logging.FileHandler(log_file, mode="w", encoding="utf-8"))
    for h in handlers:
        h.setFormatter(fmt)
        root.addHandler(h)
    root.setLevel(level)
    root._grpoflow_configured = True  # type: ignore[attr-defined]


def fail(message: str, log_file: str | None = None, code: int = 1):
    line = f"grpoflow: error: {message}"
    if log_file:
        try:
            with open(log_file, "a", encoding="utf-8") as fh:
                fh.write(line + "\n")
        except OSError:
            pass
    print(line, file=sys.stderr, flush=True)
    sys.exit(code)


def guarded(fn: Callable[..., Any], *args: Any, log_file: str | None = None, what: str = "job", **kwargs: Any) -> Any:
    """Call ``fn``; turn a GrpoflowError into one line + exit 1 and anything else into a logged traceback."""
    try:
        return fn(*args, **kwargs)
    except GrpoflowError as exc:
        fail(str(exc), log_file)
    except KeyboardInterrupt:
        fail(f"{what} interrupted", log_file, code=130)
    except Exception as exc:  # a bug: keep the traceback, but in the log, not as a wall on the terminal
        tb = traceback.format_exc()
        if log_file:
            with open(log_file, "a", encoding="utf-8") as fh:
                fh.write(tb)
            where = f" (traceback in {log_file})"
        else:
            sys.stderr.write(tb)
            where = ""
        fail(f"internal error in {what}: {type(exc).__name__}: {exc}{where}", None)
