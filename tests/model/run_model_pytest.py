"""CTest's entry to one of the engine's pytest files: skipped (exit 77) when
pytest, numpy, torch or transformers is missing, or when pytest skipped
every test in the file (the SmolLM2 GGUF or a package it needs absent);
else pytest's status."""
import sys

try:
    import numpy  # noqa: F401
    import pytest
    import torch  # noqa: F401
    import transformers  # noqa: F401
except ImportError as e:
    print(f"skipped: {e.name} is not installed")
    sys.exit(77)


class _Count:
    def __init__(self):
        self.ran = 0
        self.skipped = 0

    def pytest_runtest_logreport(self, report):
        if report.when == "call" and not report.skipped:
            self.ran += 1
        if report.skipped:
            self.skipped += 1

    def pytest_collectreport(self, report):  # a module skipped as a whole
        if report.skipped:
            self.skipped += 1


c = _Count()
rc = pytest.main(["-q", "-s", sys.argv[1]] + sys.argv[2:], plugins=[c])
# a skip of the whole module (a missing package) collects nothing: pytest's 5
if rc in (0, pytest.ExitCode.NO_TESTS_COLLECTED) and c.ran == 0 and c.skipped:
    sys.exit(77)
sys.exit(rc)
