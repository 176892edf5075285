"""The ``rng`` fixture draws the same data for a test in every process: its seed does not depend
on ``PYTHONHASHSEED`` (issue 40: ``hash(nodeid)`` made a GPU test fail for some processes only)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import seed_for

NODE = "tests/test_ops_gpu.py::test_numpy_reductions_return_numpy"


def _in_a_process(expression: str, hash_seed: int) -> str:
    tests = str(Path(__file__).parent)
    code = f"import sys; sys.path.insert(0, {tests!r}); from conftest import seed_for; print({expression})"
    env = {**os.environ, "PYTHONHASHSEED": str(hash_seed)}
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True).stdout


def test_the_seed_is_the_same_under_any_hash_seed() -> None:
    seeds = {_in_a_process(f"seed_for({NODE!r})", h) for h in (1, 2, 3)}
    assert seeds == {f"{seed_for(NODE)}\n"}


def test_hash_of_the_node_id_is_not() -> None:
    assert len({_in_a_process(f"abs(hash({NODE!r})) % 2**32", h) for h in (1, 2, 3)}) > 1


def test_the_fixture_seeds_from_the_node_id(rng: np.random.Generator, request: pytest.FixtureRequest) -> None:
    assert (
        rng.integers(0, 2**63, 4).tolist()
        == np.random.default_rng(seed_for(request.node.nodeid)).integers(0, 2**63, 4).tolist()
    )
