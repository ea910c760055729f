#!/usr/bin/env python3
"""Runs the compatibility suites with the pinned SDKs and with the
newest ones from PyPI, each SDK in its own virtualenv (e2b and
prime-sandboxes pin incompatible versions of connectrpc), and reports:

* which versions ran,
* a `test result:` line per pinned run (what scripts/test counts),
* the newest runs' results and every test whose outcome differs from the
  pinned run's.

Exit status: non-zero only when a pinned run failed; the newest SDKs failing
is reported, not fatal.

Usage: run.py --venvs DIR [--pinned-only] [--junit-dir DIR (kept; else a temporary one)] [-- PYTEST ARGS]
(scripts/lib/python.sh makes the virtualenvs and calls this.)
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
from pathlib import Path

HERE = Path(__file__).resolve().parent

SUITES = {
    "e2b": [
        "test_e2b.py",
        "test_e2b_isolation.py",
        "test_e2b_network.py",
        "test_e2b_events.py",
        "test_e2b_volumes.py",
        "test_e2b_templates.py",
        "test_code_interpreter.py",
    ],
    "prime": ["test_prime.py"],
}
# Run once, with the pinned e2b SDK: the benchmark and the TypeScript smoke
# tests (which do not use the Python SDKs).
BENCH = "test_e2b_bench.py"
TS_TESTS = {
    "test_e2b_ts": "e2b",
    "test_e2b_volumes_ts": "e2b",
    "test_e2b_templates_ts": "e2b",
    "test_code_interpreter_ts": "@e2b/code-interpreter",
}
PINNED_ONLY = {"e2b": [BENCH, *(f"{t}.py" for t in TS_TESTS)]}
# The distributions whose versions a run reports; the e2b virtualenvs also
# hold E2B's code-interpreter SDK, which builds on e2b.
DISTS = {"e2b": ["e2b", "e2b-code-interpreter"], "prime": ["prime-sandboxes"]}


def sdk_version(python: Path, dist: str) -> str:
    r = subprocess.run(
        [str(python), "-c", f"import importlib.metadata as m; print(m.version({dist!r}))"],
        capture_output=True,
        text=True,
    )
    return r.stdout.strip() or "not installed"


def outcomes(junit: Path) -> dict:
    """test id -> passed | failed | skipped."""
    out = {}
    if not junit.exists():
        return out
    for case in ET.parse(junit).iter("testcase"):
        name = f"{case.get('classname')}::{case.get('name')}"
        if case.find("failure") is not None or case.find("error") is not None:
            out[name] = "failed"
        elif case.find("skipped") is not None:
            out[name] = "skipped"
        else:
            out[name] = "passed"
    return out


def run(sdk: str, variant: str, venvs: Path, junit_dir: Path, extra: list, bench: bool):
    python = venvs / f"{sdk}-{variant}" / "bin" / "python"
    if not python.exists():
        print(f"!! {python} is missing: no {sdk} {variant} run", flush=True)
        return None, {}
    files = list(SUITES[sdk]) + (PINNED_ONLY.get(sdk, []) if variant == "pinned" else [])
    junit = junit_dir / f"{sdk}-{variant}.xml"
    env = dict(os.environ)
    if bench:
        env.setdefault("STOCKADE_COMPAT_BENCH_OUT", str(junit_dir / "bench.json"))
    dist = "e2b" if sdk == "e2b" else "prime-sandboxes"
    version = sdk_version(python, dist)
    also = "".join(f", {d} {sdk_version(python, d)}" for d in DISTS[sdk][1:])
    print(f"\n==> {dist} {version}{also} ({variant})", flush=True)
    cmd = [
        str(python),
        "-m",
        "pytest",
        "-p",
        "no:cacheprovider",
        "-q",
        "-rfE",
        f"--junitxml={junit}",
        *files,
        *extra,
    ]
    code = subprocess.run(cmd, cwd=HERE, env=env).returncode
    return (version, code), outcomes(junit)


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--venvs", required=True, type=Path)
    p.add_argument("--pinned-only", action="store_true")
    p.add_argument("--junit-dir", type=Path)
    p.add_argument("pytest_args", nargs="*")
    a = p.parse_args()
    if a.junit_dir:
        a.junit_dir.mkdir(parents=True, exist_ok=True)
        return report(a, a.junit_dir)
    with tempfile.TemporaryDirectory(prefix="stockade-compat-junit-") as tmp:
        return report(a, Path(tmp))


def report(a, junit_dir: Path) -> int:
    """Runs the suites, writing their JUnit files to `junit_dir`, and prints
    the summary; the exit status of the whole run."""
    npm = {package: npm_version(package) for package in TS_TESTS.values()}
    for package, version in npm.items():
        if version:
            print(f"==> npm {package} {version} (TypeScript smoke test)")
        else:
            print(f"==> npm {package} not installed: its TypeScript smoke test is skipped")

    results = {}
    for sdk in SUITES:
        results[(sdk, "pinned")] = run(
            sdk, "pinned", a.venvs, junit_dir, a.pytest_args, bench=(sdk == "e2b")
        )
    if not a.pinned_only:
        for sdk in SUITES:
            results[(sdk, "newest")] = run(sdk, "newest", a.venvs, junit_dir, a.pytest_args, bench=False)

    print("\n==> Compatibility summary", flush=True)
    status = 0
    for (sdk, variant), (meta, tests) in results.items():
        dist = "e2b" if sdk == "e2b" else "prime-sandboxes"
        passed = sum(1 for o in tests.values() if o == "passed")
        failed = sum(1 for o in tests.values() if o == "failed")
        skipped = sum(1 for o in tests.values() if o == "skipped")
        version = meta[0] if meta else "missing"
        # pytest's 5: a -k or file filter left nothing of this suite to run.
        nothing_selected = meta is not None and meta[1] == 5 and not tests
        if nothing_selected:
            print(f"{dist} {version} ({variant}): no test selected")
            continue
        ran_ok = meta is not None and meta[1] == 0 and failed == 0 and tests
        if variant == "pinned":
            if not ran_ok:
                status = 1
                if not tests:
                    failed = max(failed, 1)  # a suite that could not run counts as failed
            word = "ok" if ran_ok else "FAILED"
            # The line scripts/test adds up, in cargo's words.
            print(
                f"test result: {word}. {passed} passed; {failed} failed; {skipped} ignored; "
                f"0 measured; 0 filtered out; ({dist} {version}, pinned)"
            )
        else:
            print(
                f"newest {dist} {version}: {passed} passed, {failed} failed, {skipped} skipped"
                + ("" if ran_ok else "  (reported, not fatal)")
            )
    for sdk in SUITES:
        pinned = results.get((sdk, "pinned"), (None, {}))[1]
        newest = results.get((sdk, "newest"), (None, {}))[1]
        if not newest:
            continue
        once = tuple(f[: -len(".py")] + "::" for f in PINNED_ONLY.get(sdk, []))
        differ = sorted(
            t
            for t in set(pinned) | set(newest)
            if pinned.get(t) != newest.get(t) and not t.startswith(once)
        )
        dist = "e2b" if sdk == "e2b" else "prime-sandboxes"
        if differ:
            print(f"{dist}: outcomes that differ between the pinned and the newest SDK:")
            for t in differ:
                print(f"  {t}: pinned {pinned.get(t, 'absent')}, newest {newest.get(t, 'absent')}")
        else:
            print(f"{dist}: the newest SDK gives the same outcomes as the pinned one")
    for test, package in TS_TESTS.items():
        print(typescript_line(results.get(("e2b", "pinned"), (None, {}))[1], test, package, npm[package]))
    bench = junit_dir / "bench.json"
    if bench.exists():
        print("benchmark figures:")
        print(bench.read_text())
    return status


def npm_version(package: str):
    """The version of an npm package in STOCKADE_COMPAT_NODE_MODULES, or None."""
    modules = os.environ.get("STOCKADE_COMPAT_NODE_MODULES")
    pkg = Path(modules) / package / "package.json" if modules else None
    return json.loads(pkg.read_text())["version"] if pkg and pkg.exists() else None


def typescript_line(pinned: dict, test: str, package: str, version) -> str:
    """The summary's line on one TypeScript test, which is optional:
    without node, npm or the npm package it is skipped, and this says so."""
    outcome = next((o for t, o in pinned.items() if t.startswith(f"{test}::")), "not run")
    if outcome == "skipped" or version is None:
        return (
            f"TypeScript {test} (npm {package}): skipped (optional; needs node 20 and npm, "
            "which scripts/lib/python.sh does not install)"
        )
    return f"TypeScript {test} (npm {package} {version}): {outcome}"


if __name__ == "__main__":
    sys.exit(main())
