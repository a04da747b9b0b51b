"""Checks of the benchmarks' measurement rules (the benchmarks themselves are not tests)."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
