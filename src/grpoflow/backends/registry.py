"""The registry of the training backends: one line per backend, importing its Backend object (``BACKEND`` of
``grpoflow.backends.<name>``, grpoflow.training.Backend) under its name. Adding a backend is its folder,
``src/grpoflow/backends/<name>/``, plus one line here (docs/backends.md, "Adding a backend"); the lines stay in
alphabetical order, the order of the schema's ``backend`` enum (grpoflow.schema reads each folder's ``schema.yaml``).

Nothing registers itself: the lines are plain imports, above every backend, and ``BACKENDS`` is what they import.
grpoflow.backends asks this module (imported on first use, so a job that imports its own backend's modules does not
import the others).
"""

from __future__ import annotations

from grpoflow.backends.trl import BACKEND as trl
from grpoflow.backends.tunix import BACKEND as tunix
from grpoflow.backends.verl import BACKEND as verl

# name -> Backend object: each line above, whose name is its Backend object's (``BACKEND.name``), in their order.
BACKENDS = {name: value for name, value in dict(globals()).items() if getattr(value, "name", None) == name}

# The backend of an experiment that names none (``backend:`` unset); grpoflow.config fills it in, and config/README.md
# shows it as the key's default.
DEFAULT = verl
