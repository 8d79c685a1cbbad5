"""Unit tests for speclib.core.jsonutil: what summary.json and every to_dict go through."""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest

from speclib.core.jsonutil import jsonable

pytestmark = pytest.mark.unit


class _HasToDict:
    def to_dict(self) -> dict:
        return {"x": 1}


def test_numpy_missing_values_and_containers_become_plain_json() -> None:
    value = {
        "nan": np.float64("nan"),
        "inf": math.inf,
        "scalars": (np.int64(3), np.bool_(True), np.float32(1.5), np.str_("s")),
        1: pd.NA,
        "nat": pd.NaT,
        "nested": [{"a": (1, 2)}],
        "obj": _HasToDict(),
        "plain": ["text", None, False, 2, 0.5],
    }
    out = jsonable(value)
    assert out == {
        "nan": None,
        "inf": None,
        "scalars": [3, True, 1.5, "s"],
        "1": None,
        "nat": None,
        "nested": [{"a": [1, 2]}],
        "obj": {"x": 1},
        "plain": ["text", None, False, 2, 0.5],
    }
    assert type(out["scalars"][0]) is int and type(out["scalars"][1]) is bool
    json.dumps(out, allow_nan=False)
