"""Mutation check: does the test suite catch small, deliberate bugs? (Not part of make test.)

    .venv/bin/python scripts/mutants.py                  # every mutant, each with its own tests
    .venv/bin/python scripts/mutants.py --full           # every mutant against the whole suite
    .venv/bin/python scripts/mutants.py --only lease-release-twice capi-key-block-32-bit
    .venv/bin/python scripts/mutants.py --list           # the mutants, and whether each applies

Each mutant in MUTANTS is one small bug: a file, an exact snippet of it and its replacement. A
snippet that is not in the file exactly once makes the mutant "stale" (the code moved on: update
or drop the mutant); it is reported, never silently skipped.

How a run works, in a scratch directory (removed at the end, --keep to keep it):
- `git worktree add --detach` of the committed HEAD (uncommitted changes are not seen);
- a scratch virtual environment whose own site-packages holds bounded_router, copied from the
  tree's python/bounded_router, with the library built from the tree's Go code by
  `go build -buildmode=c-shared` (the tests' dependencies come from this repository's .venv,
  through a .pth file, so nothing is downloaded);
- the selected tests once on the unmutated code: a test that fails there is reported as flaky
  and not counted against any mutant;
- then, for each mutant: the snippet replaced; the Python file copied into the scratch
  site-packages, or for a Go file the library rebuilt and the mutant's Go packages tested with
  `go test -json`; the mutant's Python tests run with pytest's --junitxml; then the file restored.

The table gives, for each mutant, "caught" or "survived" and by how many tests: failing pytest
test cases (from the junit XML) plus failing top-level Go tests (from go test -json). By default
each mutant runs the test files listed with it (the ones that could plausibly see it, so a run
takes minutes, not hours); --full runs the whole Python suite for every mutant (about 3 minutes
per mutant on two cores), and --tests replaces the lists with the given pytest arguments.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from typing import Dict, List, Optional, Sequence, Tuple

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGE = "python/bounded_router/"


@dataclasses.dataclass(frozen=True)
class Mutant:
    name: str
    path: str  # relative to the repository
    old: str  # must occur exactly once in the file
    new: str
    tests: Tuple[str, ...] = ()  # pytest arguments, relative to tests/
    go: Tuple[str, ...] = ()  # Go packages to test (Go mutants)
    why: str = ""
    one_is_enough: str = ""  # why a single catching test suffices, where that is expected


PROXY_TESTS = ("python/test_http_adversarial.py", "python/test_integrations.py", "python/test_integrations_asgi.py",
               "python/test_integrations_aiohttp.py")
ROUTER_TESTS = ("python/test_router.py", "python/test_leases.py", "python/test_reference_vectors.py",
                "python/test_batch.py", "python/test_headers.py", "python/test_fast_path.py", "python/test_metrics.py")

MUTANTS: List[Mutant] = [
    # -- the Python mutants -------------------------------------------------------------
    Mutant(
        "proxy-drops-query",
        PACKAGE + "integrations/asgi.py",
        'target = worker_path(lease.worker_url, raw_path).encode("latin-1") + (b"?" + query if query else b"")',
        'target = worker_path(lease.worker_url, raw_path).encode("latin-1")',
        PROXY_TESTS,
        why="ASGIProxy (and serve) forward the path without its query string",
    ),
    Mutant(
        "proxy-forwards-hop-by-hop",
        PACKAGE + "integrations/_forwarding.py",
        "    return [(n, v) for n, v in pairs if _lower(n) not in named]",
        "    return pairs",
        PROXY_TESTS,
        why="hop-by-hop and Connection-named headers forwarded both ways",
    ),
    Mutant(
        "asgi-no-release-on-disconnect",
        PACKAGE + "integrations/asgi.py",
        '            log.debug("response from %s ended: %s", self.lease.worker_url, ending)\n'
        "            self.lease.release(outcome=final_outcome(self.status_code, ending))",
        '            log.debug("response from %s ended: %s", self.lease.worker_url, ending)\n'
        '            if ending != "disconnected":\n'
        "                self.lease.release(outcome=final_outcome(self.status_code, ending))",
        PROXY_TESTS,
        why="the ASGI proxy keeps the lease of a client that left (the safety net releases it later)",
    ),
    Mutant(
        "aiohttp-no-release-on-disconnect",
        PACKAGE + "integrations/aiohttp.py",
        '            log.debug("response from %s ended: %s", lease.worker_url, ending)\n'
        "            lease.release(outcome=final_outcome(status, ending))",
        '            log.debug("response from %s ended: %s", lease.worker_url, ending)\n'
        '            if ending != "disconnected":\n'
        "                lease.release(outcome=final_outcome(status, ending))",
        PROXY_TESTS,
        why="the aiohttp proxy keeps the lease of a client that left",
    ),
    Mutant(
        "remove-worker-keeps-url-map",
        PACKAGE + "router.py",
        '        self._native.change_membership("br_remove_worker", raw, len(raw))',
        '        self._native.call("br_remove_worker", raw, len(raw))',
        ROUTER_TESTS + ("python/test_conformance_differential.py",),
        why="remove_worker leaves the worker id -> URL map and the decision cache as they were",
        one_is_enough="no route can observe it: worker ids are never reused (core's "
        "TestWorkerIDsAreNeverReused), so a stale entry is never looked up; only the white-box check "
        "that the cache starts again sees it",
    ),
    Mutant(
        "metrics-last-worker-load-zero",
        PACKAGE + "metrics.py",
        '        samples["worker_load"].append((worker_labels, worker.load))',
        '        samples["worker_load"].append((worker_labels, 0 if worker is stats.workers[-1] else worker.load))',
        ("python/test_metrics.py", "python/test_gateway.py", "python/test_examples.py", "python/test_fast_path.py"),
        why="metrics show the last worker's load as 0",
    ),
    Mutant(
        "lease-release-twice",
        PACKAGE + "lease.py",
        "        lease_id = self._id\n        if not lease_id:\n            return False\n        self._id = 0",
        "        lease_id = self._id\n        if not lease_id:\n            return True\n        self._id = 0",
        ROUTER_TESTS,
        why="Lease.release returns True on the second call too",
    ),
    Mutant(
        "routing-key-header-ignored",
        PACKAGE + "_encoding.py",
        '    (b"x-smg-target-worker", b"x-smg-routing-key", b"authorization", b"x-forwarded-for", b"cookie")',
        '    (b"x-smg-target-worker", b"authorization", b"x-forwarded-for", b"cookie")',
        ROUTER_TESTS + PROXY_TESTS[1:2],
        why="X-SMG-Routing-Key is not passed to the library",
    ),
    Mutant(
        "from-cli-args-drops-a-field",
        PACKAGE + "args.py",
        '        values["worker_urls"] = list(values.get("worker_urls") or [])',
        '        values["worker_urls"] = list(values.get("worker_urls") or [])\n        values.pop("min_load_gap")',
        ("python/test_config.py", "python/test_serve.py", "python/test_simulate.py"),
        why="RouterArgs.from_cli_args loses min_load_gap (the default is used)",
    ),
    Mutant(
        "skew-half-accepted",
        PACKAGE + "policy.py",
        "    if not math.isfinite(number) or number < 1.0:\n"
        '        raise ValueError("max_load_skew must be a finite number >= 1.0, got %r" % (number if math.isfinite(number) else value,))',
        "    if not math.isfinite(number) or number < 0.5:\n"
        '        raise ValueError("max_load_skew must be a finite number >= 1.0, got %r" % (number if math.isfinite(number) else value,))',
        ("python/test_config.py", "python/test_conformance_bad_input.py"),
        why="max_load_skew 0.5 is accepted by the Python policy config",
    ),
    # -- core/ ----------------------------------------------------------------------------------
    Mutant(
        "core-hit-wait-ignores-the-least",
        "core/cache_aware.go",
        "float64(queued-c.v.leastPrefillLoad()) <= allowed",
        "float64(queued) <= allowed",
        ("python/test_prefill.py", "python/test_conformance_differential.py"),
        ("./core",),
        why="the hit wait compares a hit's queue with its allowance, not its excess over the least prefill load",
    ),
    Mutant(
        "core-prefill-memo-not-moved",
        "core/router.go",
        "r.view.leastPrefill.moved(w.index, w.prefillLoad-delta, w.prefillLoad)",
        "_ = delta",
        (),
        ("./core",),
        why="a prefill load change does not update the least prefill load's memo",
    ),
    Mutant(
        "core-release-many-counts-unknown",
        "core/batch.go",
        "\t\tif ok {\n\t\t\treleased++\n\t\t}",
        "\t\tif ok || id != 0 {\n\t\t\treleased++\n\t\t}",
        ("python/test_batch.py", "python/test_fast_path.py", "python/test_leases.py"),
        ("./core", "./capi"),
        why="ReleaseMany counts leases that were already released or never issued",
    ),
    Mutant(
        "core-ring-exact-position-skipped",
        "core/ring.go",
        "\ti, _ := slices.BinarySearch(r.positions[lo:hi], position)\n\treturn lo + i",
        "\ti, found := slices.BinarySearch(r.positions[lo:hi], position)\n\tif found {\n\t\ti++\n\t}\n\treturn lo + i",
        ("python/test_reference_vectors.py", "python/test_conformance_differential.py"),
        ("./core",),
        why="a key hashed exactly onto a virtual node goes to the next one (the contract: at or after)",
    ),
    Mutant(
        "core-active-keys-never-drop",
        "core/router.go",
        "\tif s.hasKey && r.keys.remove(s.worker.id, s.keyPos) {\n\t\ts.worker.activeKeys--\n\t}",
        "\tif s.hasKey {\n\t\tr.keys.remove(s.worker.id, s.keyPos)\n\t}",
        ("python/test_leases.py", "python/test_metrics.py", "python/test_conformance_differential.py"),
        ("./core",),
        why="releasing the last lease of a key does not lower the worker's active keys",
    ),
    Mutant(
        "core-power-of-two-tie-to-second",
        "core/power_of_two.go",
        "\tif v.workers[second].load < v.workers[first].load {",
        "\tif v.workers[second].load <= v.workers[first].load {",
        ("python/test_parity.py", "python/test_conformance_differential.py"),
        ("./core",),
        why="a tie goes to the second worker drawn (the contract: the first)",
        one_is_enough="either worker of a tied pair is a uniform pick, so only a test that scripts the draws sees it",
    ),
    Mutant(
        "core-power-of-two-draws-twice",
        "core/power_of_two.go",
        "\tj := (i + 1 + v.randomIndex(n-1)) % n",
        "\tj := v.randomIndex(n)",
        ("python/test_parity.py", "python/test_conformance_differential.py"),
        ("./core",),
        why="the two workers drawn may be the same one, so the most loaded can be chosen",
    ),
    Mutant(
        "core-manual-miss-not-held",
        "core/keymemory.go",
        "\t\tBranchManualOccupiedHit, BranchManualOccupiedMiss, BranchManualVacant:",
        "\t\tBranchManualOccupiedHit, BranchManualVacant:",
        ("python/test_parity.py", "python/test_conformance_differential.py"),
        ("./core",),
        why="a key moved off a failed worker is not pinned to its new one",
    ),
    Mutant(
        "core-routing-key-headers-last-wins",
        "core/request.go",
        "\t\tif h.seen[i] && validHeaderValue(h.values[i]) {\n\t\t\treq.RoutingKey = []byte(h.values[i])\n\t\t\tbreak\n\t\t}",
        "\t\tif h.seen[i] && validHeaderValue(h.values[i]) {\n\t\t\treq.RoutingKey = []byte(h.values[i])\n\t\t}",
        ("python/test_parity.py", "python/test_conformance_differential.py"),
        ("./core", "./gateway"),
        why="of several routing_key_headers with a value, the last configured wins (the contract: the first)",
    ),
    # -- capi/ ----------------------------------------------------------------------------------
    Mutant(
        "capi-header-lengths-big-endian",
        "capi/headers.go",
        "\tn := uint64(binary.LittleEndian.Uint32(block))",
        "\tn := uint64(binary.BigEndian.Uint32(block))",
        ("python/test_headers.py",),
        ("./capi",),
        why="header block lengths read big-endian",
    ),
    Mutant(
        "capi-key-block-32-bit",
        "capi/batch.go",
        "\ttotal := uint64(0)\n\tfor _, n := range lengths {\n\t\ttotal += uint64(n)\n\t}\n\tif total != uint64(len(block)) {",
        "\ttotal := uint32(0)\n\tfor _, n := range lengths {\n\t\ttotal += n\n\t}\n\tif uint64(total) != uint64(len(block)) {",
        ("python/test_batch.py",),
        ("./capi",),
        why="br_route_keys adds the key lengths in 32 bits: lengths that overflow pass the check",
    ),
    Mutant(
        "capi-max-arg-len-excluded",
        "capi/convert.go",
        "\tcase uint64(n) > maxArgLen:",
        "\tcase uint64(n) >= maxArgLen:",
        ("python/test_hostile_input.py", "python/test_conformance_bad_input.py"),
        ("./capi",),
        why="an argument of exactly BR_MAX_ARG_LEN bytes is refused",
        one_is_enough="the boundary is 2 GiB - 1 bytes: only a Go test can pass that length without "
        "allocating it (a view over reserved memory)",
    ),
    Mutant(
        "capi-null-with-length",
        "capi/convert.go",
        "\tcase n == 0:\n\t\treturn nil, nil\n\tcase p == nil:\n\t\treturn nil, invalidArgument(\"%s is NULL but %s_len",
        "\tcase n == 0 || p == nil:\n\t\treturn nil, nil\n\tcase p == nil:\n\t\treturn nil, invalidArgument(\"%s is NULL but %s_len",
        ("python/test_hostile_input.py", "python/test_conformance_bad_input.py", "python/test_native.py"),
        ("./capi",),
        why="a NULL pointer with a non-zero length is taken as an empty argument",
    ),
    Mutant(
        "capi-take-previous-keeps-lease-slot",
        "capi/route.go",
        "\tslots[0], slots[2] = 0, 0",
        "\tslots[2] = 0",
        ("python/test_native.py", "python/test_fast_path.py", "python/test_conformance_bad_input.py"),
        ("./capi",),
        why="a failed br_release_then_* call leaves the previous lease id in io[0]",
    ),
    Mutant(
        "capi-acquire-ignores-weight",
        "capi/exports.go",
        "\t\tlease, w, err := r.AcquireWeighted(u, k, leaseWeight(weight))",
        "\t\tlease, w, err := r.AcquireWeighted(u, k, 1)",
        ("python/test_weights.py",),
        ("./capi",),
        why="br_acquire counts weight 1 whatever its weight argument",
    ),
    Mutant(
        "core-batch-skips-request-checks",
        "core/batch.go",
        "\t\tif err == nil {\n\t\t\terr = CheckRequest(req)\n\t\t}",
        "",
        ("python/test_weights.py",),
        ("./core", "./capi"),
        why="a batch routes requests with too many prefix blocks (and panics on a bad weight)",
    ),
    Mutant(
        "python-weight-bool-accepted",
        PACKAGE + "_request.py",
        "    if isinstance(weight, bool) or not isinstance(weight, numbers.Integral):",
        "    if not isinstance(weight, numbers.Integral):",
        ("python/test_weights.py",),
        why="route(weight=True) counts a lease of weight 1 instead of refusing a bool",
    ),
]


def run(cmd: Sequence[str], cwd: str, env: Optional[Dict[str, str]] = None, timeout: Optional[float] = None) -> subprocess.CompletedProcess:
    return subprocess.run(list(cmd), cwd=cwd, env=env, timeout=timeout, capture_output=True, text=True)


class Scratch:
    """A worktree of HEAD and a virtual environment holding the tree's package."""

    def __init__(self, keep: bool) -> None:
        self.keep = keep
        self.dir = tempfile.mkdtemp(prefix="bounded-router-mutants-")
        self.tree = os.path.join(self.dir, "tree")
        self.venv = os.path.join(self.dir, "venv")
        self.python = os.path.join(self.venv, "bin", "python")

    def __enter__(self) -> Scratch:
        subprocess.run(["git", "-C", REPO, "worktree", "add", "--quiet", "--detach", self.tree, "HEAD"], check=True)
        base = os.path.join(REPO, ".venv", "bin", "python")
        subprocess.run([base, "-m", "venv", self.venv], check=True)
        site = run([self.python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], REPO).stdout.strip()
        deps = run([base, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], REPO).stdout.strip()
        with open(os.path.join(site, "zz_repository_venv.pth"), "w") as f:
            f.write(deps + "\n")  # appended to sys.path after the scratch site-packages
        self.package = os.path.join(site, "bounded_router")
        shutil.copytree(os.path.join(self.tree, PACKAGE), self.package)
        self.build_library()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.keep:
            print("scratch copy kept in", self.dir)
            return
        subprocess.run(["git", "-C", REPO, "worktree", "remove", "--force", self.tree], check=False)
        shutil.rmtree(self.dir, ignore_errors=True)

    def build_library(self) -> Optional[str]:
        """Build the tree's library into the scratch package; the error text if it fails."""
        out = os.path.join(self.package, "libbounded_router.so")
        result = run(["go", "build", "-buildmode=c-shared", "-trimpath", "-o", out, "./capi"], self.tree)
        return None if result.returncode == 0 else result.stderr.strip()

    def install(self, path: str) -> None:
        """Copy a file of python/bounded_router from the tree into the scratch package."""
        shutil.copyfile(os.path.join(self.tree, path), os.path.join(self.package, path[len(PACKAGE):]))

    def pytest(self, args: Sequence[str], label: str) -> Tuple[List[str], str]:
        """(failing test ids, problem) of a pytest run from the tree's tests/ directory."""
        xml = os.path.join(self.dir, "junit-%s.xml" % label)
        env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1")
        cmd = [self.python, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--junitxml", xml, *args]
        try:
            result = run(cmd, os.path.join(self.tree, "tests"), env, timeout=1800)
        except subprocess.TimeoutExpired:
            return [], "timeout"
        if not os.path.exists(xml):
            return [], "pytest did not run: " + (result.stdout + result.stderr).strip()[-300:]
        failed = []
        for case in ET.parse(xml).getroot().iter("testcase"):
            if case.find("failure") is not None or case.find("error") is not None:
                failed.append("%s::%s" % (case.get("classname", ""), case.get("name", "")))
        return failed, ""

    def go_test(self, packages: Sequence[str]) -> Tuple[List[str], str]:
        """(failing top-level Go tests, problem) of go test -json on packages."""
        if not packages:
            return [], ""
        result = run(["go", "test", "-count=1", "-json", *packages], self.tree, timeout=1800)
        failed, built = [], set()
        for line in result.stdout.splitlines():
            try:
                event = json.loads(line)
            except ValueError:
                continue
            test = event.get("Test")
            if event.get("Action") in ("run", "pass", "fail"):
                built.add(event.get("Package"))
            if event.get("Action") == "fail" and test and "/" not in test:
                failed.append("%s.%s" % (event["Package"].rsplit("/", 1)[-1], test))
        if result.returncode and not failed:
            return [], "go test failed without a failing test (build error?): " + (result.stdout + result.stderr)[-300:]
        return failed, ""


def apply(tree: str, mutant: Mutant) -> Optional[str]:
    """Put the mutant in the tree; None, or why it does not apply (stale)."""
    path = os.path.join(tree, mutant.path)
    if not os.path.exists(path):
        return "file is gone"
    with open(path) as f:
        text = f.read()
    count = text.count(mutant.old)
    if count != 1:
        return "snippet found %d times (exactly once expected)" % count
    with open(path, "w") as f:
        f.write(text.replace(mutant.old, mutant.new))
    return None


def restore(tree: str, mutant: Mutant) -> None:
    subprocess.run(["git", "-C", tree, "checkout", "--quiet", "--", mutant.path], check=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", nargs="+", metavar="NAME", help="run these mutants only")
    parser.add_argument("--full", action="store_true", help="run the whole Python suite for every mutant")
    parser.add_argument("--tests", nargs="+", metavar="ARG", help="pytest arguments (from tests/) for every mutant")
    parser.add_argument("--list", action="store_true", help="list the mutants and whether each applies; run nothing")
    parser.add_argument("--keep", action="store_true", help="keep the scratch directory")
    parser.add_argument("--verbose", action="store_true", help="after the table, every failing test of each mutant")
    args = parser.parse_args()

    mutants = MUTANTS
    if args.only:
        unknown = set(args.only) - {m.name for m in MUTANTS}
        if unknown:
            parser.error("unknown mutants: %s" % ", ".join(sorted(unknown)))
        mutants = [m for m in MUTANTS if m.name in args.only]

    def tests_of(m: Mutant) -> List[str]:
        if args.tests:
            return list(args.tests)
        return ["python"] if args.full else list(m.tests)

    if args.list:
        for m in mutants:
            with open(os.path.join(REPO, m.path)) as f:
                n = f.read().count(m.old)
            print("%-38s %-5s %-45s %s" % (m.name, "ok" if n == 1 else "STALE", m.path, m.why))
        return 0

    rows = []
    with Scratch(args.keep) as scratch:
        started = time.monotonic()
        # The unmutated code first: what fails here is flaky or broken, not caught.
        baseline_args = sorted({t for m in mutants for t in tests_of(m)})
        flaky, problem = scratch.pytest(baseline_args, "baseline")
        go_packages = sorted({p for m in mutants for p in m.go})
        go_flaky, go_problem = scratch.go_test(go_packages)
        if problem or go_problem:
            print("the unmutated code does not pass:", problem or go_problem)
            return 2
        flaky_set = set(flaky) | set(go_flaky)
        for name in sorted(flaky_set):
            print("fails without a mutant (not counted):", name)
        print("baseline: %.0f s" % (time.monotonic() - started), flush=True)

        for m in mutants:
            t0 = time.monotonic()
            stale = apply(scratch.tree, m)
            if stale:
                rows.append((m, "STALE", [], stale))
                continue
            try:
                problem = ""
                if m.path.endswith(".go"):
                    problem = scratch.build_library() or ""
                    if problem:
                        problem = "does not build: " + problem[-200:]
                elif m.path.startswith(PACKAGE):
                    scratch.install(m.path)
                failed: List[str] = []
                if not problem:
                    go_failed, problem = scratch.go_test(m.go)
                    py_failed, py_problem = scratch.pytest(tests_of(m), m.name)
                    problem = problem or py_problem
                    failed = [t for t in go_failed + py_failed if t not in flaky_set]
            finally:
                restore(scratch.tree, m)
                if m.path.endswith(".go"):
                    scratch.build_library()
                elif m.path.startswith(PACKAGE):
                    scratch.install(m.path)
            status = "caught" if failed or problem == "timeout" else ("ERROR" if problem else "survived")
            rows.append((m, status, failed, problem))
            print("%-38s %-8s %3d tests  (%.0f s)" % (m.name, status, len(failed), time.monotonic() - t0), flush=True)

    print()
    print("| mutant | file | result | tests failing | e.g. |")
    print("|---|---|---|---|---|")
    for m, status, failed, problem in rows:
        example = ", ".join(sorted(failed)[:2]) + (" ..." if len(failed) > 2 else "")
        print("| %s | %s | %s | %d | %s |" % (m.name, m.path, status, len(failed), example or problem))
    if args.verbose:
        for m, _, failed, _ in rows:
            print("\n%s:\n  %s" % (m.name, "\n  ".join(sorted(failed)) or "(none)"))
    for m, status, failed, _ in rows:
        if status == "caught" and len(failed) < 2:
            print("%s: caught by one test; %s" % (m.name, m.one_is_enough or "add a second test"))
    survived = [m.name for m, status, _, _ in rows if status != "caught"]
    return 1 if survived else 0


if __name__ == "__main__":
    sys.exit(main())
