"""The one exception type users see.

A ``GrpoflowError`` carries a complete one-line message: what is wrong, and the config key, path or command
that fixes it. Workflow entry points (``grpoflow.job.run_job``) print it as a single line and exit 1;
anything else is a bug and gets a traceback in the job's log.
"""


class GrpoflowError(Exception):
    """A user-facing error: bad config, missing or malformed input, an environment that cannot run the job."""

    def __init__(self, message: str):
        # One line by contract: callers pass a full sentence; collapse stray newlines from embedded values.
        super().__init__(" ".join(str(message).split()))


class ConfigError(GrpoflowError):
    """The workflow configuration is invalid (schema, unknown key, cross-field check)."""


class DataError(GrpoflowError):
    """An input data file is missing, empty or malformed."""
