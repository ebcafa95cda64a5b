"""Modules renamed to say what they hold: the old name still imports in each form a script writes,
warns once naming the new path, and gives the very module at the new path."""

from __future__ import annotations

import re
import sys
import warnings

import pytest

from dgl_zerocopy.cuda.gather import gather_plan

OLD = "dgl_zerocopy.cuda.gather.launch"
NEW = "dgl_zerocopy.cuda.gather.gather_plan"


@pytest.fixture
def first_import():
    """Forget the old name, as in a fresh process (the warning comes with the first import)."""
    parent = sys.modules["dgl_zerocopy.cuda.gather"]
    sys.modules.pop(OLD, None)
    vars(parent).pop("launch", None)
    yield
    sys.modules.pop(OLD, None)
    vars(parent).pop("launch", None)


@pytest.mark.parametrize("statement", ["from dgl_zerocopy.cuda.gather import launch as got", "import dgl_zerocopy.cuda.gather.launch as got"])
def test_the_old_plan_module_warns_and_is_the_new_one(first_import, statement):
    namespace: dict = {}
    with pytest.warns(DeprecationWarning, match=re.escape(f"{OLD} moved to {NEW}: import {NEW} instead")) as caught:
        exec(compile(statement, __file__, "exec"), namespace)
    assert namespace["got"] is gather_plan
    assert [w.filename for w in caught if OLD in str(w.message)] == [__file__], "one warning, at the importing line"


def test_names_from_the_old_plan_module_are_the_new_objects(first_import):
    with pytest.warns(DeprecationWarning, match=re.escape(NEW)):
        from dgl_zerocopy.cuda.gather.launch import GatherPlan, kernel_arguments, plan_decode, plan_gather
    assert (GatherPlan, plan_gather, plan_decode, kernel_arguments) == (
        gather_plan.GatherPlan,
        gather_plan.plan_gather,
        gather_plan.plan_decode,
        gather_plan.kernel_arguments,
    )
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # imported once: no second warning
        from dgl_zerocopy.cuda.gather.launch import LINE_BYTES
    assert LINE_BYTES == gather_plan.LINE_BYTES == 128


def test_the_new_module_keeps_its_own_name():
    assert gather_plan.__name__ == NEW and gather_plan.__spec__.name == NEW
