"""CTest's entry to the binding tests: skipped (exit 77, shown as skipped)
when pytest or numpy is not installed, else pytest over this folder."""
import os
import sys

try:
    import numpy  # noqa: F401
    import pytest
except ImportError as e:
    print(f"python_binding skipped: {e.name} is not installed (pip install numpy pytest ml_dtypes)")
    sys.exit(77)

sys.exit(pytest.main(["-q", os.path.dirname(os.path.abspath(__file__))] + sys.argv[1:]))
