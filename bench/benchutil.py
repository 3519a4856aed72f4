"""Helpers shared by the GPU benchmarks (bench/gpu_*.py)."""
import os
import subprocess


def commit():
    """The commit a result belongs to: SF_COMMIT first (a copy of the tree on a device
    machine may carry a stale .git), else git's HEAD, marked when the tree has changes."""
    if os.environ.get("SF_COMMIT"):
        return os.environ["SF_COMMIT"]
    try:
        out = subprocess.check_output(["git", "rev-parse", "--short", "HEAD"],
                                      stderr=subprocess.DEVNULL).decode().strip()
        dirty = subprocess.call(["git", "diff", "--quiet", "HEAD"], stderr=subprocess.DEVNULL)
        return out + ("+changes" if dirty else "")
    except Exception:  # noqa: BLE001 - no git: say so
        return "unknown"
