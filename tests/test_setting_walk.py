"""The walk of a setting from config/config.yaml to the trainer (issue 42; tests/archwalk.py defines the hops, what
"dark" and "climbs back up" mean, and the back-arrows among the walk's modules).

The walk is written by hand where static analysis cannot follow; ``test_the_walks_follow_the_code`` fails when the
code it names moved (an anchor no longer found) or a hop claims an import that is not there: write the walk again.
Issue 42's target, kept passing: in the walk of ``learning_rate`` no hop climbs
back up and no arrow between its modules runs against the layer order (a JSON string and a process boundary stay:
the rule's params remain a JSON string).
"""

from __future__ import annotations

import archwalk as W
import pytest


@pytest.mark.parametrize("key", sorted(W.WALKS))
def test_the_walks_follow_the_code(key):
    steps = W.walk(key)
    assert not [s for s in steps if s.problem], "\n".join(f"{s.where}: {s.problem}" for s in steps if s.problem)
    assert steps[0].hop.via == "start" and any(s.module == "trl (library)" for s in steps)  # reaches GRPOConfig


def test_the_walk_of_learning_rate_never_climbs_back_up():
    steps = W.walk("learning_rate")
    climbs = [f"{s.where}: {s.caller} -> {s.module} ({s.hop.via})" for s in steps if s.climbs]
    back = [f"{e.where()}: {e.source} -> {e.target} ({e.kind})" for e in W.back_arrows_in(steps)]
    assert not climbs and not back, (
        "hops climbing back up:\n" + "\n".join(climbs) + "\nback-arrows:\n" + "\n".join(back)
    )
