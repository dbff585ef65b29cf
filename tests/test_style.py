"""The code is ruff clean (configured in pyproject.toml)."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.skipif(shutil.which("ruff") is None, reason="ruff is in the test extras")
def test_ruff_clean():
    proc = subprocess.run(["ruff", "check", "--quiet", str(ROOT)], capture_output=True,
                          text=True, cwd=ROOT)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_engine_never_imports_estimators():
    """Imports point one way: estimators -> daskabsp, never back."""
    pattern = re.compile(r"^\s*(from|import)\s+[\w.]*estimators", re.MULTILINE)
    offenders = [str(p.relative_to(ROOT)) for p in (ROOT / "daskabsp").rglob("*.py")
                 if pattern.search(p.read_text())]
    assert offenders == []
