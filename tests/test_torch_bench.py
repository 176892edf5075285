"""``kerneldsl bench torch`` on the CPU: its figures come from calls it checked, and a wrong result
stops it."""

from __future__ import annotations

import argparse
import json

import pytest

torch = pytest.importorskip("torch")

from kerneldsl.bench import torch_bench  # noqa: E402
from kerneldsl.cli import main  # noqa: E402


@pytest.mark.parametrize("clock", ["wall", "cpu"])
def test_the_cpu_section_reports_every_contender_and_the_targets_ratios(clock: str) -> None:
    figures = torch_bench.bench_cpu(argparse.Namespace(calls=20, reps=2, clock=clock))
    direct = figures[torch_bench.DIRECT]
    baseline = figures[torch_bench.BASELINE]
    ours = figures[torch_bench.OURS]
    custom = figures[torch_bench.CUSTOM]
    assert min(direct, baseline, ours, custom) > 0
    assert figures[torch_bench.FLOOR_IDENTITY] > 0
    assert figures["kd.torch.op above the allocating floor operator (µs)"] == pytest.approx(
        ours - figures[torch_bench.FLOOR_ALLOCATE]
    )
    assert figures["kd.torch.op above the allocating direct call (µs, target <= 2)"] == pytest.approx(ours - baseline)
    assert figures["kd.torch.op above the preallocated direct call (µs)"] == pytest.approx(ours - direct)
    assert figures["kd.torch.op overhead / custom_op's (target <= 0.5)"] == pytest.approx(
        (ours - baseline) / (custom - baseline)
    )


def test_a_wrong_result_stops_the_bench() -> None:
    x = torch.full((1,), 3.0)
    with pytest.raises(torch_bench.WrongResultError, match="custom_op"):
        torch_bench._checked(x * 3, x, "custom_op")


@pytest.mark.skipif(torch.cuda.is_available(), reason="the cuda section is skipped only without a GPU")
def test_under_json_a_skipped_section_says_why_on_stderr_and_stdout_is_json(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["bench", "torch", "--only", "cuda", "--json"]) == 0
    out, err = capsys.readouterr()
    assert "cuda: skipped" in err
    assert set(json.loads(out)) == {"meta", torch_bench.SECTIONS["cuda"][0]}
