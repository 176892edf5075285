"""``kerneldsl check SCRIPT``: a script run on the CPU device with every check on (bounds, races,
init, sync, undefined behaviour), one report per finding at its line."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from ..runtime.checks import CHECKS_ENV, REPORT_ENV, parse_checks
from ..runtime.host_toolchain import ADDRESS_EXIT, address_sanitizer_environment
from ..runtime.selection import DEVICE_ENV


def cmd_check(args: argparse.Namespace) -> int:
    """Run SCRIPT on the CPU device with every check on, then print one report per finding: exit 1
    when there were findings, else the script's own exit status."""
    spelled = "bounds,sync,address,undefined" if args.address else "all,undefined"
    checks = parse_checks(f"{spelled}{f',seed={args.seed}' if args.seed else ''}")
    with tempfile.TemporaryDirectory(prefix="kerneldsl-check-") as scratch:
        findings_file = Path(scratch) / "findings.jsonl"
        env = {**os.environ, CHECKS_ENV: checks.spelled(), DEVICE_ENV: "cpu", REPORT_ENV: str(findings_file)}
        if args.address:
            env.update(address_sanitizer_environment())
        status = subprocess.run([sys.executable, args.script, *args.args], env=env, check=False).returncode
        lines = findings_file.read_text(encoding="utf-8").splitlines() if findings_file.exists() else []
    findings = list(dict.fromkeys(lines))  # a finding met twice (a retried call) is reported once
    for number, line in enumerate(findings, 1):
        finding = json.loads(line)
        print(f"finding {number} [{finding['check']}]: {finding['report']}")
    print(f"kerneldsl check: {len(findings) or 'no'} finding{'s' * (len(findings) != 1)} ({checks.spelled()})")
    if args.address and status == ADDRESS_EXIT:
        print("kerneldsl check: AddressSanitizer stopped the script: its report is above")
        return 1
    return 1 if findings else status
