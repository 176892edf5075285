"""``kerneldsl bench torch`` on the CPU: its figures come from calls it checked, and a wrong result
stops it."""

from __future__ import annotations

import argparse

import pytest

torch = pytest.importorskip("torch")

from kerneldsl.bench import torch_bench  # noqa: E402


def test_the_cpu_section_reports_every_contender_and_the_targets_ratios() -> None:
    figures = torch_bench.bench_cpu(argparse.Namespace(calls=20, reps=2))
    direct = figures["direct kerneldsl call (µs)"]
    ours = figures["kd.torch.op from eager torch (µs)"]
    custom = figures["custom_op by hand (µs)"]
    assert min(direct, ours, custom) > 0
    assert figures["kd.torch.op above the direct call (µs, target <= 2)"] == pytest.approx(ours - direct)
    assert figures["kd.torch.op overhead / custom_op's (target <= 0.5)"] == pytest.approx(
        (ours - direct) / (custom - direct)
    )


def test_a_wrong_result_stops_the_bench() -> None:
    x = torch.full((1,), 3.0)
    with pytest.raises(torch_bench.WrongResultError, match="custom_op"):
        torch_bench._checked(x * 3, x, "custom_op")
