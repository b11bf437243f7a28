"""What ``zoo doctor``'s checks write: findings (a severity, the check, what was seen, the fix) and report sections."""
from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass
from pathlib import Path

SEVERITIES = ("error", "warn", "info", "ok")
NOISY = 1e-4  # relative spread of repeated losses on one batch above which the loss is random itself
TASKS = ("classification", "regression", "segmentation", "tokens", "unlabelled")


@dataclass
class Finding:
    severity: str  # error | warn | info | ok
    check: str
    message: str
    fix: str = ""

    def line(self) -> str:
        return f"[{self.severity}] {self.check}: {self.message}" + (f" -> {self.fix}" if self.fix else "")


class Done(BaseException):
    """Stops the recipe once the doctor has what it needs (a BaseException: recipes' handlers let it pass)."""


def fmt(x: float) -> str:
    return "nan" if x is None or not math.isfinite(x) else f"{x:.4g}"


class Report:
    """Findings and markdown sections, logged as they come; ``write`` puts them in report.md and findings.json."""

    def __init__(self, out_dir: Path, log=print):
        self.dir, self.log = out_dir, log
        self.findings: list[Finding] = []
        self.sections: list[str] = []

    def add(self, severity: str, check: str, message: str, fix: str = "") -> None:
        finding = Finding(severity, check, message, fix)
        self.findings.append(finding)
        self.log(finding.line())

    def _plots(self) -> list[Path]:
        return []

    def write(self, header: list[str]) -> Path:
        order = {s: i for i, s in enumerate(SEVERITIES)}
        findings = sorted(self.findings, key=lambda f: order[f.severity])
        table = ["## Findings", "", "| severity | check | finding | fix |", "|---|---|---|---|"]
        table += [f"| {f.severity} | {f.check} | {f.message} | {f.fix} |" for f in findings]
        plots = self._plots()
        body = header + [""] + table + [""] + [s + "\n" for s in self.sections]
        body += [f"![{p.stem}]({p.name})" for p in plots]
        path = self.dir / "report.md"
        path.write_text("\n".join(body) + "\n")
        (self.dir / "findings.json").write_text(json.dumps([dataclasses.asdict(f) for f in findings], indent=2) + "\n")
        return path
