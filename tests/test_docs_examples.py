"""Every Python example of the guides (``docs/guide/*.md``) runs as written, alone: each block in a
fresh namespace with its own imports, on the GPU where there is one, else on the CPU device. A
block whose first line is ``# needs a GPU`` carries the ``gpu`` marker and runs only on a GPU
(``pytest -m gpu``); on a machine without one it is skipped, saying so."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from kerneldsl.runtime import driver

GUIDES = Path(__file__).parent.parent / "docs" / "guide"
GPU_MARK = "# needs a GPU"
_BLOCK = re.compile(r"^```python\n(.*?)^```$", flags=re.S | re.M)


def _examples() -> list[Any]:
    params = []
    for guide in sorted(GUIDES.glob("*.md")):
        text = guide.read_text()
        for match in _BLOCK.finditer(text):
            code = match.group(1)
            line = text.count("\n", 0, match.start()) + 2  # the block's first line of code
            gpu = code.startswith(GPU_MARK)
            marks = [pytest.mark.gpu] if gpu else []
            params.append(pytest.param(guide, line, code, gpu, marks=marks, id=f"{guide.stem}:{line}"))
    return params


def _has_gpu() -> bool:
    return driver.driver_available() and driver.device_count() > 0


def test_the_guides_have_examples() -> None:
    assert len(_examples()) >= 20


@pytest.mark.parametrize(("guide", "line", "code", "gpu"), _examples())
def test_a_guide_example_runs_alone(
    guide: Path, line: int, code: str, gpu: bool, isolated_cache_module: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    if gpu and not _has_gpu():
        pytest.skip("a GPU-only example, and this machine has no GPU")
    if not _has_gpu():
        monkeypatch.setenv("KERNELDSL_DEVICE", "cpu")
    monkeypatch.setenv("KERNELDSL_ARCH", "sm_90")  # for inspect() and compile() without a device
    # Line numbers in a traceback are the guide's: the block is compiled as if it stood there.
    compiled = compile("\n" * (line - 1) + code, str(guide), "exec")
    exec(compiled, {"__name__": f"docs_example_{guide.stem}_{line}"})
