"""What a Hugging Face Hub model id looks like, in one place (start models, evaluation models, the model card).
Imports nothing of grpoflow."""

from __future__ import annotations

import os
import re

HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")


def is_hub_id(model: str | None) -> bool:
    """``model`` is an ``org/name`` Hub id, not a path (relative, absolute, or one that exists here)."""
    return (
        bool(model)
        and bool(HUB_ID.match(model))
        and not model.startswith(("./", "../", "/"))
        and not os.path.exists(model)
    )
