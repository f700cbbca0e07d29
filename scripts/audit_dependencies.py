"""Known vulnerabilities in the locked dependencies (pip-audit over requirements.lock, PyPI's
advisories) fail the run. A package the advisory service could not answer for is reported by
name, never counted as passed: where the service is out of reach (a machine that reaches only
PyPI's package index, not its JSON API), the run says that nothing was audited."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PIP_AUDIT = [
    str(ROOT / ".venv/bin/pip-audit"),
    "-r",
    str(ROOT / "requirements.lock"),
    "--require-hashes",
    "--disable-pip",
    "--vulnerability-service",
    "pypi",
    "--format",
    "json",
    "--progress-spinner",
    "off",
]


def main() -> int:
    run = subprocess.run(PIP_AUDIT, capture_output=True, text=True, timeout=600)
    try:
        report = json.loads(run.stdout)
    except ValueError:
        print(
            f"audit: pip-audit did not report (exit {run.returncode}): {run.stderr.strip()[-500:]}",
            file=sys.stderr,
        )
        return 2
    status, lines = judge(report)
    for line in lines:
        print(f"audit: {line}", file=sys.stderr)
    return status


def judge(report: dict) -> tuple[int, list[str]]:
    """pip-audit's JSON report -> (exit status, what to say): 1 when any locked package has a
    known vulnerability."""
    lines = []
    dependencies = report.get("dependencies", [])
    vulnerable = [d for d in dependencies if d.get("vulns")]
    skipped = [d for d in dependencies if d.get("skip_reason")]
    for dependency in vulnerable:
        for vuln in dependency["vulns"]:
            fixed = ", ".join(vuln.get("fix_versions") or []) or "no fixed release yet"
            lines.append(
                f"{dependency['name']} {dependency['version']}: {vuln['id']} (fixed in {fixed})"
            )
    audited = len(dependencies) - len(skipped)
    if skipped and not audited:
        lines.append(
            f"NOTHING AUDITED: the advisory service answered for none of the {len(dependencies)} "
            "locked packages (PyPI's JSON API is out of reach from this machine)"
        )
    elif skipped:
        lines.append(f"not audited ({len(skipped)}): {', '.join(d['name'] for d in skipped)}")
    lines.append(
        f"{audited} of {len(dependencies)} locked packages audited, "
        f"{len(vulnerable)} with known vulnerabilities"
    )
    return (1 if vulnerable else 0), lines


if __name__ == "__main__":
    sys.exit(main())
