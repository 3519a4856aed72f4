"""The main job on the CPU, as JSON: `seqfuse --cpu --json` on the default
CPU workload must give, for every workload, a fused and a naive entry with
finite positive times and both errors under the tolerance, and exit 0.  The
tolerance is this test's own (the CPU default runs in f32 against a double
reference), not the one the tool reports, so loosening the tool's cannot
loosen the test.

usage: check_main_job.py path/to/seqfuse
"""
import json
import math
import subprocess
import sys

# largest relative error of an f32 workload against the double reference
F32_TOL = 2e-5


def main():
    exe = sys.argv[1]
    proc = subprocess.run([exe, "--cpu", "--json", "--seed", "1"], capture_output=True, text=True)
    sys.stderr.write(proc.stderr)
    try:
        doc = json.loads(proc.stdout)
    except ValueError as e:
        print("FAIL the output is not JSON (%s):\n%s" % (e, proc.stdout))
        return 1
    problems = []
    results = doc.get("results", [])
    if len(results) < 3:
        problems.append("expected the three workloads, got %d results" % len(results))
    for r in results:
        name = r.get("workload", "?")
        if "error" in r:
            problems.append("%s: %s" % (name, r["error"]))
            continue
        for side in ("fused", "naive"):
            e = r.get(side)
            if not isinstance(e, dict):
                problems.append("%s: no %s entry" % (name, side))
                continue
            if r.get("dtype") != "f32":
                problems.append("%s: dtype %r, the CPU default runs f32" % (name, r.get("dtype")))
            tol = F32_TOL
            if not (math.isfinite(e["ms"]) and e["ms"] > 0):
                problems.append("%s: %s time %r" % (name, side, e["ms"]))
            if not (math.isfinite(e["err"]) and e["err"] <= tol):
                problems.append("%s: %s error %r over %g" % (name, side, e["err"], tol))
            if not (math.isfinite(e["bytes"]) and e["bytes"] > 0):
                problems.append("%s: %s bytes %r" % (name, side, e["bytes"]))
        if not (isinstance(r.get("fused"), dict) and isinstance(r.get("naive"), dict)):
            continue
        if r["fused"]["ms"] > 0 and r["naive"]["ms"] > 0:
            if not math.isclose(r["speedup"], r["naive"]["ms"] / r["fused"]["ms"], rel_tol=1e-3):
                problems.append("%s: speedup %r is not naive / fused" % (name, r["speedup"]))
        if r["bytes_avoided"] < 0:
            problems.append("%s: the naive path moves fewer bytes than the fused" % name)
        print("%-18s fused %.3f ms err %.2e | naive %.3f ms err %.2e | %.1fx" %
              (name, r["fused"]["ms"], r["fused"]["err"], r["naive"]["ms"], r["naive"]["err"], r["speedup"]))
    if proc.returncode != 0:
        problems.append("seqfuse exited %d" % proc.returncode)
    for p in problems:
        print("FAIL " + p)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
