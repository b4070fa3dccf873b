"""The reconcile core's choice of a change (pure): every combination of what is deployed and what is wanted."""

from __future__ import annotations

import itertools

from airflow_streaming.reconcile.change import Change, choose_change


def test_every_combination_has_one_change():
    seen = {}
    for wanted, deployed, same_name, transition in itertools.product(("v1", "v2"), (None, "v1"), (True, False),
                                                                      (None, "in_place", "parallel")):
        change = choose_change(wanted, "s", deployed, "s" if same_name else "s_v2", transition)
        seen[(wanted, deployed, same_name, transition)] = change
        if deployed is None:
            assert change == Change.DEPLOY
        elif wanted == deployed and same_name:
            assert change == Change.UNCHANGED  # whatever the transition says: nothing to move
        else:
            assert change == (Change.PARALLEL if transition == "parallel" else Change.UPGRADE)
    assert set(seen.values()) == set(Change)
