"""NVTX ranges (``kd.profile()``, ``KERNELDSL_NVTX=1``) through a stand-in ``nvtx`` module that
records the ranges it is asked for; the real package is the ``kerneldsl[nvtx]`` extra."""

from __future__ import annotations

import contextlib
import sys
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import kerneldsl as kd
from kerneldsl.errors import NvtxNotAvailableError
from kerneldsl.runtime import nvtx


@kd.kernel(grid=kd.cdiv("n", 256), block=256)
def bump(y: kd.InOut["float32", "n"]):
    return f"index_t i = blockIdx.x * (index_t)blockDim.x + threadIdx.x; if (i < n) {y}[i] += 1.0f;"


@pytest.fixture
def ranges(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, str]]:
    """(domain, message) of each range opened through the stand-in ``nvtx``."""
    opened: list[tuple[str, str]] = []

    @contextlib.contextmanager
    def annotate(message: str, domain: str) -> Iterator[None]:
        opened.append((domain, message))
        yield

    monkeypatch.setitem(sys.modules, "nvtx", types.SimpleNamespace(annotate=annotate))
    monkeypatch.setattr(nvtx, "_module", None)
    return opened


def test_profile_without_the_nvtx_package_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "nvtx", None)  # import nvtx raises ImportError
    monkeypatch.setattr(nvtx, "_module", None)
    with pytest.raises(NvtxNotAvailableError, match=r"kerneldsl\[nvtx\]"):
        with kd.profile():
            pass


def test_ranges_are_off_outside_a_profile_block(ranges: list[tuple[str, str]]) -> None:
    assert not nvtx.enabled()
    with nvtx.span("launch", "x"):
        pass
    assert ranges == []


def test_a_profile_block_ranges_compiles_launches_and_transfers(
    drv: Any, ranges: list[tuple[str, str]], isolated_cache: Path
) -> None:
    with kd.profile():
        assert nvtx.enabled()
        y = kd.default_session().to_device(np.zeros(1000, np.float32))
        bump(y)
        y.to_host()
    assert not nvtx.enabled()
    names = [message.split()[0] for _, message in ranges]
    assert {domain for domain, _ in ranges} == {"kerneldsl"}
    assert names.count("compile") == 1 and names.count("launch") == 1
    assert "cuMemcpyHtoDAsync" in names and "cuMemcpyDtoHAsync" in names
    assert any(message.startswith("launch bump[") for _, message in ranges)


def test_calls_inside_a_profile_block_make_no_c_launch_entries(drv: Any, ranges: list[tuple[str, str]]) -> None:
    y = kd.default_session().zeros(1000, np.float32)
    bump._forget_launches()
    with kd.profile():
        bump(y)
        bump(y)
    assert bump._remembered_launches == 0
    assert [m.split()[0] for _, m in ranges].count("launch") == 2
