"""pytest plugin for running the peers' test suites against seqfuse (bench/peers/README.md).

Load it with `-p sfpeers_plugin` (bench/peers on PYTHONPATH): the peers' test files live
in the ignored .peers/ folder, outside any conftest.py of ours.  It

  - samples: keeps a seeded, deterministic sample of at most SF_PEERS_MAX_PER_TEST
    parametrisations of each test function (0 or unset: all), taken as the parametrize
    marks are expanded (before -k / -m).  The sample depends only on the seed
    (SF_PEERS_SEED, default 0), the function's name and its parametrisations in order, so
    every machine picks the same cases (the JSON's sample_digest hashes the kept test ids);
  - classifies every test: passed; refused (the test raised seqfuse.SeqfuseError with
    status SF_ERR_UNSUPPORTED: seqfuse said it does not do this; shown by pytest as a skip
    with the reason "seqfuse refused: ..."); failed (any other exception or a failed
    assert, in setup, call or teardown); skipped (the test's own pytest.skip);
  - writes a JSON summary to SF_PEERS_JSON (when set), at the end and every 15 s while
    running, so a run cut short by a time limit still leaves its counts: per test
    function the parametrisations collected, sampled, passed / refused / failed /
    skipped, seconds spent, the refusal reasons counted (numbers in the message replaced
    by N) and the first failures' messages with the test's printed "diff" lines.

SF_PEERS_SUITE names the suite in the JSON (default: the test file's name).
SF_PEERS_COLLECT_WITHOUT_GPU=1 lets the peers' modules import on a machine without a GPU
(they query the device's compute capability at import): for `--collect-only` checks only.
"""
import hashlib
import json
import os
import random
import re
import subprocess
import sys
import time

import pytest

MAX_FAILURES = 5       # failure messages kept per test function
MAX_MESSAGE = 600      # characters kept of each
WRITE_EVERY_S = 15.0

_state = {"functions": {}, "totals": {}, "outcome": {}, "func_of": {}, "start": time.time(),
          "last_write": 0.0, "digest": "", "interrupted": False}


def _func_key(item):
    return item.nodeid.split("[", 1)[0]


def _env_int(name, default):
    v = os.environ.get(name, "")
    return int(v) if v.strip() else default


def pytest_configure(config):
    if os.environ.get("SF_PEERS_COLLECT_WITHOUT_GPU") == "1":
        try:
            import torch
            if not torch.cuda.is_available():
                torch.cuda.get_device_capability = lambda *a, **k: (9, 0)
        except ImportError:
            pass


def _sample(key, n, n_max):
    """Indices (ascending) of the cases kept of a test function with n cases."""
    if n_max <= 0 or n <= n_max:
        return list(range(n))
    rng = random.Random(f"{os.environ.get('SF_PEERS_SEED', '0')}|{key.rsplit('::', 1)[-1]}")
    return sorted(rng.sample(range(n), n_max))


@pytest.hookimpl(trylast=True)
def pytest_generate_tests(metafunc):
    """Sample at parametrisation, after the parametrize marks have been expanded: the
    suites have ~185,000 parametrisations, and making a test item of each before dropping
    most costs about a minute.  Uses Metafunc's list of parametrisations (a private field,
    stable for years); without it the sample is taken in pytest_collection_modifyitems,
    with the same result."""
    calls = getattr(metafunc, "_calls", None)
    if not isinstance(calls, list) or not calls:
        return
    key = metafunc.definition.nodeid
    keep = _sample(key, len(calls), _env_int("SF_PEERS_MAX_PER_TEST", 0))
    _state["totals"][key] = len(calls)
    if len(keep) < len(calls):
        metafunc._calls = [calls[i] for i in keep]


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(session, config, items):
    n_max = _env_int("SF_PEERS_MAX_PER_TEST", 0)
    groups = {}
    for it in items:
        groups.setdefault(_func_key(it), []).append(it)
    keep = set()
    for key, its in groups.items():
        total = _state["totals"].get(key)
        if total is None:  # not sampled at parametrisation
            total = len(its)
            its = [its[i] for i in _sample(key, len(its), n_max)]
        keep.update(id(it) for it in its)
        name = key.rsplit("::", 1)[-1]
        _state["functions"][name] = dict(
            node=key, total=total, sampled=len(its), passed=0, refused=0, failed=0,
            skipped=0, seconds=0.0, refusals={}, failures=[])
        for it in its:
            _state["func_of"][it.nodeid] = name
    kept = [it for it in items if id(it) in keep]
    dropped = [it for it in items if id(it) not in keep]
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = kept
    _state["digest"] = hashlib.sha1("\n".join(it.nodeid for it in kept).encode()).hexdigest()[:16]


def _refusal(exc):
    """The detail of a SeqfuseError with status SF_ERR_UNSUPPORTED, else None."""
    sf = sys.modules.get("seqfuse")
    if sf is None or not isinstance(exc, sf.SeqfuseError):
        return None
    if exc.status != sf.SF_ERR_UNSUPPORTED:
        return None
    return exc.detail or str(exc)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    rep = outcome.get_result()
    if call.excinfo is None:
        return
    detail = _refusal(call.excinfo.value)
    if detail is not None and rep.when == "call":
        rep.outcome = "skipped"
        rep.longrepr = (str(item.path), item.location[1] or 0, "seqfuse refused: " + detail)
        rep.user_properties.append(("sf_refused", detail))
    elif rep.failed:
        rep.user_properties.append(("sf_message", call.excinfo.exconly()[:MAX_MESSAGE]))


def _record_failure(f, report, msg):
    if len(f["failures"]) >= MAX_FAILURES:
        return
    diffs = [ln.strip() for ln in (report.capstdout or "").splitlines() if "diff" in ln][:8]
    f["failures"].append(dict(test=report.nodeid.split("::")[-1], when=report.when,
                              message=msg, printed=diffs))


def pytest_runtest_logreport(report):
    name = _state["func_of"].get(report.nodeid)
    if name is None:
        return
    f = _state["functions"][name]
    f["seconds"] += report.duration
    props = dict(report.user_properties)
    prev = _state["outcome"].get(report.nodeid)
    new = None
    if "sf_refused" in props:
        new = "refused"
        reason = re.sub(r"\d+(\.\d+)?", "N", props["sf_refused"])[:160]
        f["refusals"][reason] = f["refusals"].get(reason, 0) + 1
    elif report.failed:
        if prev != "failed":
            new = "failed"
            _record_failure(f, report, props.get("sf_message", str(report.longrepr)[-MAX_MESSAGE:]))
    elif report.skipped:
        new = "skipped"
    elif report.passed and report.when == "call":
        new = "passed"
    if new is not None and prev != "failed":
        if prev is not None:
            f[prev] -= 1
        f[new] += 1
        _state["outcome"][report.nodeid] = new
    if time.time() - _state["last_write"] > WRITE_EVERY_S:
        _write()


def pytest_keyboard_interrupt(excinfo):
    _state["interrupted"] = True


def pytest_sessionfinish(session, exitstatus):
    if exitstatus == pytest.ExitCode.INTERRUPTED:
        _state["interrupted"] = True
    _write(final=True)


def _env():
    e = dict(date=time.strftime("%Y-%m-%d"), python=sys.version.split()[0])
    torch = sys.modules.get("torch")
    if torch is not None:
        e["torch"] = torch.__version__
        try:
            e["gpu"] = torch.cuda.get_device_name() if torch.cuda.is_available() else "none"
        except Exception:  # noqa: BLE001 - the summary must still be written
            e["gpu"] = "unknown"
    sf = sys.modules.get("seqfuse")
    if sf is not None:
        e["seqfuse"] = sf.version()
        e["seqfuse_lib"] = sf.library_path
    commit = os.environ.get("SF_COMMIT")
    if not commit:
        try:
            commit = subprocess.check_output(["git", "rev-parse", "--short", "HEAD"],
                                             stderr=subprocess.DEVNULL).decode().strip()
        except Exception:  # noqa: BLE001
            commit = "unknown"
    e["commit"] = commit
    try:
        from peer_refs import peers_dir
        with open(os.path.join(peers_dir(), "SOURCES.txt")) as fh:
            e["peers"] = fh.read().strip().splitlines()
    except OSError:
        e["peers"] = []
    e["autotune"] = os.environ.get("SF_AUTOTUNE", "")
    return e


def _write(final=False):
    path = os.environ.get("SF_PEERS_JSON")
    _state["last_write"] = time.time()
    if not path:
        return
    fs = _state["functions"]
    suite = os.environ.get("SF_PEERS_SUITE") or (
        os.path.basename(next(iter(fs.values()))["node"].split("::")[0]) if fs else "none")
    done = sum(f["passed"] + f["refused"] + f["failed"] + f["skipped"] for f in fs.values())
    out = dict(suite=suite, env=_env(), seed=os.environ.get("SF_PEERS_SEED", "0"),
               max_per_test=_env_int("SF_PEERS_MAX_PER_TEST", 0), sample_digest=_state["digest"],
               finished=final and not _state["interrupted"], interrupted=_state["interrupted"],
               completed=done, seconds=round(time.time() - _state["start"], 1),
               functions={k: dict(v, seconds=round(v["seconds"], 2)) for k, v in fs.items()})
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    tmp = path + ".tmp"
    with open(tmp, "w") as fh:
        json.dump(out, fh, indent=1)
    os.replace(tmp, path)
