"""The native library: lazy loading, the loader's errors, the ABI check, fork safety, and the
ring against the reference model (tests/reference_model.py)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import bounded_router
from bounded_router import ForkedProcessError, LibraryLoadError, Router, RouterClosedError, _native
from reference_model import ReferenceRouter, xxh64
from support import W, urls

TIMEOUT = 60


def run_python(code, tmp_path, env=None):
    """Run code in a fresh interpreter (cwd outside the source tree); a hang fails the test."""
    full_env = dict(os.environ)
    full_env.pop("BOUNDED_ROUTER_LIBRARY", None)
    full_env.update(env or {})
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        cwd=str(tmp_path),
        env=full_env,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )


def test_package_metadata():
    assert bounded_router.__version__ == "0.1.0"
    assert set(bounded_router.__all__) <= set(dir(bounded_router))
    package_dir = os.path.dirname(bounded_router.__file__)
    assert os.path.isfile(os.path.join(package_dir, "libbounded_router.so"))
    assert os.path.isfile(os.path.join(package_dir, "py.typed"))


def test_import_does_not_load_the_library(tmp_path):
    result = run_python(
        """
        import bounded_router
        from bounded_router import _native, Router, RouterArgs, BoundedConsistentHashingConfig
        BoundedConsistentHashingConfig(2.0, 1)
        assert not _native.is_loaded()
        Router(["http://a"]).close()
        assert _native.is_loaded()
        print("ok")
        """,
        tmp_path,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "ok"


def test_library_override_missing_file(tmp_path):
    result = run_python(
        """
        import bounded_router
        try:
            bounded_router.Router(["http://a"])
        except bounded_router.LibraryLoadError as e:
            assert isinstance(e, ImportError)
            print("error:", e)
        """,
        tmp_path,
        env={"BOUNDED_ROUTER_LIBRARY": str(tmp_path / "missing.so")},
    )
    assert result.returncode == 0, result.stderr
    assert "missing.so" in result.stdout and "BOUNDED_ROUTER_LIBRARY" in result.stdout


def test_library_override_points_to_another_build(tmp_path):
    copy = tmp_path / "copy-of-lib.so"
    shutil.copy(os.path.join(os.path.dirname(bounded_router.__file__), "libbounded_router.so"), copy)
    result = run_python(
        """
        import bounded_router
        from bounded_router import _native
        r = bounded_router.Router(["http://a"])
        print(_native.library().path, r.route("k").worker_url)
        """,
        tmp_path,
        env={"BOUNDED_ROUTER_LIBRARY": str(copy)},
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == [str(copy), "http://a"]


def test_not_a_bounded_router_library(tmp_path):
    import ctypes.util

    libm = ctypes.util.find_library("m")
    if libm is None:
        pytest.skip("no libm to load")
    result = run_python(
        """
        import bounded_router
        try:
            bounded_router.Router(["http://a"])
        except bounded_router.LibraryLoadError as e:
            print("error:", e)
        """,
        tmp_path,
        env={"BOUNDED_ROUTER_LIBRARY": libm},
    )
    assert result.returncode == 0, result.stderr
    assert "does not export br_" in result.stdout


STUB_LIBRARY = """
#include <stdint.h>
uint32_t br_abi_version(void) { return 1; }
const char *br_last_error(void) { return ""; }
"""
STUB_EXPORTS = [
    "br_router_new", "br_router_free", "br_add_worker", "br_remove_worker", "br_set_workers",
    "br_set_healthy", "br_route_key", "br_route", "br_acquire", "br_release", "br_release_abandoned",
    "br_lease_workers_json", "br_workers_json", "br_stats_json",
]  # fmt: skip


def test_abi_version_mismatch(tmp_path):
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler to build a library of another ABI version")
    source = tmp_path / "stub.c"
    source.write_text(STUB_LIBRARY + "".join("int %s(void) { return -5; }\n" % name for name in STUB_EXPORTS))
    library = tmp_path / "libstub.so"
    subprocess.run([cc, "-shared", "-fPIC", "-o", str(library), str(source)], check=True, timeout=TIMEOUT)
    result = run_python(
        """
        import bounded_router
        try:
            bounded_router.Router(["http://a"])
        except ImportError as e:
            print(type(e).__name__, e)
        """,
        tmp_path,
        env={"BOUNDED_ROUTER_LIBRARY": str(library)},
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("LibraryLoadError")
    # The stub is a library of ABI version 1, from before br_release_then_route_key.
    assert "ABI version 1" in result.stdout and "needs version %d" % _native.ABI_VERSION in result.stdout


def test_error_classes():
    assert issubclass(ForkedProcessError, RuntimeError)
    assert issubclass(RouterClosedError, RuntimeError)
    assert issubclass(LibraryLoadError, ImportError)
    error = bounded_router.NoWorkerAvailableError("target_worker_miss")
    assert isinstance(error, RuntimeError) and error.branch == "target_worker_miss"
    import pickle

    assert pickle.loads(pickle.dumps(error)).branch == "target_worker_miss"


# -- fork ------------------------------------------------------------------------------------------

# Forks, waits for the child with a deadline (a hang is reported, not waited for), prints the
# child's exit code. The child writes what happened to a pipe.
FORK_HARNESS = """
import os, sys, time

def run_child(body):
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read_end)
        try:
            report = body()
            code = 0
        except BaseException as e:
            report = "child raised %r" % (e,)
            code = 3
        os.write(write_end, report.encode())
        os._exit(code)
    os.close(write_end)
    deadline = time.monotonic() + 20
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        if time.monotonic() > deadline:
            os.kill(pid, 9)
            os.waitpid(pid, 0)
            return "HANG"
        time.sleep(0.01)
    report = os.read(read_end, 65536).decode()
    return "exit=%d %s" % (os.WEXITSTATUS(status) if os.WIFEXITED(status) else -1, report)
"""


def test_fork_after_loading_raises_forked_process_error(tmp_path):
    result = run_python(
        FORK_HARNESS
        + """
import bounded_router
from bounded_router import ForkedProcessError, Router
router = Router(["http://w0:8000", "http://w1:8000"])
lease = router.route("k")
held = router.route("other")

def child():
    outcomes = []
    calls = [
        ("route", lambda: router.route("k")),
        ("route_headers", lambda: router.route(headers={"Cookie": "c"})),
        ("route_weighted", lambda: router.route("k", weight=2, prefix_blocks=[5])),
        ("select", lambda: router.select("k")),
        ("acquire", lambda: router.acquire("http://w0:8000")),
        ("add_worker", lambda: router.add_worker("http://w9")),
        ("loads", lambda: router.loads()),
        ("branch_counts", lambda: router.branch_counts()),
        ("release", lambda: lease.release()),
        ("new_router", lambda: Router(["http://x"])),
    ]
    for name, call in calls:
        try:
            call()
            outcomes.append(name + ":no-error")
        except ForkedProcessError as e:
            text = str(e)
            ok = "fork" in text and "after" in text and "preload_app" in text
            outcomes.append(name + (":ok" if ok else ":bad-message"))
        except BaseException as e:
            outcomes.append(name + ":" + type(e).__name__)
    router.close()  # quiet: only marks the inherited copy closed
    return " ".join(outcomes)

print(run_child(child))
# the parent is unaffected
assert lease.release() is True and held.release() is True
print(router.loads())
"""
        ,
        tmp_path,
    )
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] != "HANG"
    status, *outcomes = lines[0].split()
    assert status == "exit=0", lines[0]
    assert all(outcome.endswith(":ok") for outcome in outcomes), outcomes
    assert len(outcomes) == 10
    assert lines[1] == "{'http://w0:8000': 0, 'http://w1:8000': 0}"
    assert "Exception ignored" not in result.stderr


@pytest.mark.parametrize(
    "release", ["lease.release()", 'lease.release(outcome="failure")', "lease.fail()", "router.release_many([lease])", "router.release_many([lease, lease])"]
)
def test_a_release_refused_in_a_forked_child_leaves_the_lease_held(tmp_path, release):
    # The release raises ForkedProcessError; the lease must not claim a release that never
    # happened, so a second try raises again instead of returning False. Regressions (found by an
    # audit, then a review): a release with an outcome other than success, the proxies' path,
    # and release_many claimed it.
    result = run_python(
        FORK_HARNESS
        + """
from bounded_router import ForkedProcessError, Router
router = Router(["http://w0:8000", "http://w1:8000"])
lease = router.route("k")

def child():
    seen = []
    for _ in range(2):
        try:
            seen.append("returned %r" % RELEASE)
        except ForkedProcessError:
            seen.append("forked")
        seen.append("released=%s" % lease.released)
    return " ".join(seen)

print(run_child(child))
print(lease.release(), router.active_leases())
""".replace("RELEASE", release),
        tmp_path,
    )
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == "exit=0 forked released=False forked released=False", lines[0]
    assert lines[1] == "True 0"


def test_close_in_a_forked_child_with_a_running_feed_marks_the_copy_closed(tmp_path):
    # Regression (found by a review): close() stopped the router's feeds first, and a feed's stop
    # raised ForkedProcessError in the child, so the copy was never marked closed.
    result = run_python(
        FORK_HARNESS
        + """
from bounded_router import Router
router = Router(["http://127.0.0.1:9"])
feed = router.poll_loads({"http://127.0.0.1:9": "http://127.0.0.1:9/get_load"}, interval_secs=1)

def child():
    router.close()
    return "closed=%s" % router.closed

print(run_child(child))
print(feed.running)
router.close()
print(feed.running)
""",
        tmp_path,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == ["exit=0 closed=True", "True", "False"], result.stdout


def test_forked_child_exits_quietly_with_live_router_and_leases(tmp_path):
    # The child leaves through normal interpreter shutdown with a router and an unreleased
    # lease: their finalizers must neither hang nor print errors.
    result = run_python(
        """
        import os, sys, time
        import bounded_router
        router = bounded_router.Router(["http://w0:8000"])
        lease = router.route("k")
        pid = os.fork()
        if pid == 0:
            sys.exit(0)
        deadline = time.monotonic() + 20
        while True:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                print("exit", os.WEXITSTATUS(status))
                break
            if time.monotonic() > deadline:
                os.kill(pid, 9)
                print("HANG")
                break
            time.sleep(0.01)
        print(router.loads())
        """,
        tmp_path,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == ["exit 0", "{'http://w0:8000': 1}"]
    # (Python 3.12+ may warn that forking a multi-threaded process is deprecated: the Go
    # runtime's threads. Nothing else may be printed.)
    assert "Exception ignored" not in result.stderr and "Traceback" not in result.stderr, result.stderr


def test_multiprocessing_fork_child_gets_a_clear_error(tmp_path):
    result = run_python(
        """
        import multiprocessing
        import bounded_router

        def work(queue):
            try:
                bounded_router.Router(["http://a"])
                queue.put("no error")
            except bounded_router.ForkedProcessError as e:
                queue.put("ForkedProcessError")

        if __name__ == "__main__":
            bounded_router.Router(["http://a"]).route("k").release()
            ctx = multiprocessing.get_context("fork")
            queue = ctx.Queue()
            process = ctx.Process(target=work, args=(queue,))
            process.start()
            print(queue.get(timeout=20))
            process.join(20)
        """,
        tmp_path,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "ForkedProcessError"


def test_fork_before_loading_works(tmp_path):
    result = run_python(
        FORK_HARNESS
        + """
import bounded_router
from bounded_router import _native, Router
assert not _native.is_loaded()

def child():
    router = Router(["http://w0:8000", "http://w1:8000"], policy="consistent_hashing")
    with router.route("k") as lease:
        answer = "%s %s %d" % (lease.worker_url, lease.branch, sum(router.loads().values()))
    router.close()
    return answer

print(run_child(child))
assert not _native.is_loaded()  # the child's loading did not touch the parent
router = Router(["http://w0:8000", "http://w1:8000"], policy="consistent_hashing")
print(router.route("k").worker_url)
"""
        ,
        tmp_path,
    )
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] != "HANG"
    status, url, branch, load = lines[0].split()
    assert (status, branch, load) == ("exit=0", "routing_key_hit", "1")
    assert lines[1] == url  # the same key routes identically in both processes


# -- the ring --------------------------------------------------------------------------------------


def test_xxh64_model_reference_values():
    assert xxh64(b"") == 0xEF46DB3751D8E999
    assert xxh64(b"abc") == 0x44BC2CF5AD770999


@settings(max_examples=200, deadline=None)
@given(
    keys=st.lists(st.binary(min_size=1, max_size=80), min_size=1, max_size=20),
    unhealthy=st.sets(st.sampled_from(W[:5]), max_size=4),
)
def test_preferred_worker_matches_the_ring_model(keys, unhealthy):
    model = ReferenceRouter(urls(5), policy="consistent_hashing")
    with Router(urls(5), policy="consistent_hashing") as router:
        for url in unhealthy:
            router.set_healthy(url, False)
            model.set_healthy(url, False)
        for key in keys:
            assert router.select(key).worker_url == model.select(key).worker_url


@pytest.mark.parametrize("virtual_nodes", [1, 7])
def test_virtual_nodes_in_the_ring_model(virtual_nodes):
    model = ReferenceRouter(urls(3), policy="consistent_hashing", virtual_nodes=virtual_nodes)
    with Router(urls(3), policy="consistent_hashing", virtual_nodes=virtual_nodes) as router:
        for i in range(300):
            key = ("key-%d" % i).encode()
            assert router.select(key).worker_url == model.select(key).worker_url


@pytest.mark.parametrize("method", ["spawn", "forkserver"])
def test_spawn_and_forkserver_children_work_after_the_parent_loaded_the_library(tmp_path, method):
    # The documented remedy: with the 'spawn' or 'forkserver' start method a child starts a
    # fresh interpreter and loads the library itself, even though the parent already uses it.
    script = tmp_path / "spawn_child.py"  # a file: spawned children import __main__ from it
    script.write_text(
        textwrap.dedent(
            """
            import multiprocessing
            import sys
            import bounded_router

            def work(queue):
                router = bounded_router.Router(["http://w0:8000", "http://w1:8000"], policy="consistent_hashing")
                with router.route("k") as lease:
                    queue.put(lease.worker_url + " " + lease.branch)

            if __name__ == "__main__":
                parent = bounded_router.Router(["http://w0:8000", "http://w1:8000"], policy="consistent_hashing")
                held = parent.route("k")
                ctx = multiprocessing.get_context(sys.argv[1])
                queue = ctx.Queue()
                process = ctx.Process(target=work, args=(queue,))
                process.start()
                print(queue.get(timeout=60))
                process.join(60)
                print(process.exitcode, held.worker_url, parent.loads()[held.worker_url])
            """
        )
    )
    env = {k: v for k, v in os.environ.items() if k != "BOUNDED_ROUTER_LIBRARY"}
    result = subprocess.run(
        [sys.executable, str(script), method], cwd=str(tmp_path), env=env, capture_output=True, text=True, timeout=TIMEOUT
    )
    assert result.returncode == 0, result.stderr
    child, parent = result.stdout.splitlines()
    url, branch = child.split()
    assert branch == "routing_key_hit"
    assert parent == "0 %s 1" % url  # same key, same worker, in both processes


def test_a_large_json_answer_is_asked_once_the_next_time(make_router):
    # read_json asks with a 4 KiB buffer, then again with one large enough; the next call of the
    # same export starts at half again the last answer's length, so it is one call.
    router = make_router(3)
    lib, handle = router._native.lib, router._native.handle
    for i in range(200):
        router.add_worker("http://127.0.0.1:%d" % (20000 + i))
    calls: list = []
    real = lib.br_workers_json

    def counted(*args: object) -> int:
        calls.append(args[-1])  # the capacity offered
        return real(*args)

    lib.br_workers_json = counted  # the process's library: the bound export is put back below
    try:
        lib._json_capacity.pop("br_workers_json", None)
        first = lib.read_json("br_workers_json", handle)
        assert len(calls) == 2 and calls[0] == 4096 and len(first) == 203
        del calls[:]
        assert lib.read_json("br_workers_json", handle) == first
        assert len(calls) == 1 and calls[0] > 4096
    finally:
        lib.br_workers_json = real


def test_members_json_names_the_members_as_workers_json_does(make_router):
    router = make_router(4)
    router.remove_worker(router.workers()[1].url)
    router.add_worker("http://127.0.0.1:29999/a&b")
    lib, handle = router._native.lib, router._native.handle
    expected = [[state["id"], state["url"]] for state in lib.read_json("br_workers_json", handle)]
    assert lib.read_json("br_members_json", handle) == expected
    lease = router.route(b"some key")
    assert lease.worker_url in {url for _, url in expected}
    lease.release()
