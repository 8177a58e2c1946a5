"""Input that must be refused with a clear exception, never crash the process or corrupt state:
objects that lie about their length, rings too large for memory, copies and pickles of routers
and leases, malformed header lists, and C callers that pass NULL pointers, impossible lengths or
JSON that is not exactly of the documented form (docs/contract.md, "Validation").

The C API is called here through ctypes with signatures written from the public header, not
through the package's binding, so these tests do not depend on the code they check."""

from __future__ import annotations

import copy
import ctypes
import os
import pickle
import subprocess
import sys
import textwrap
from ctypes import c_uint64

import pytest

from bounded_router import Router
from reference_model import ReferenceRouter
from support import c_api, urls

TIMEOUT = 120

# Defined in the child interpreters below: a bytes subclass and a str subclass that lie about
# their size (the str one through the bytes its encode() returns).
LIARS = """
class LongBytes(bytes):
    def __len__(self):
        return 1 << 40

class LongStr(str):
    def encode(self, *args, **kwargs):
        return LongBytes(b"k")
"""


def run_python(code: str, tmp_path) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    env.pop("BOUNDED_ROUTER_LIBRARY", None)
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        cwd=str(tmp_path),
        env=env,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )


# -- objects that lie about their length -----------------------------------------------------------

CALLS = {
    "route": "router.route(LongBytes(b'k'))",
    "route_str": "router.route(LongStr('k'))",
    "route_headers": "router.route(LongBytes(b'k'), headers={'Cookie': 'c'})",
    "header_value": "router.route(headers={'X-SMG-Routing-Key': LongBytes(b'k')})",
    "select": "router.select(LongBytes(b'k'))",
    "route_many": "router.route_many([LongBytes(b'k'), 'other'])",
    "acquire_key": "router.acquire('http://w0:8000', LongBytes(b'k'))",
    "acquire_url": "router.acquire(LongStr('http://w0:8000'))",
    "add_worker": "router.add_worker(LongStr('http://w9:8000'))",
    "remove_worker": "router.remove_worker(LongStr('http://w0:8000'))",
    "set_healthy": "router.set_healthy(LongStr('http://w0:8000'), False)",
}


@pytest.mark.parametrize("call", sorted(CALLS))
def test_lying_lengths_never_reach_the_library(tmp_path, call):
    # A bytes subclass whose __len__ lies is refused; a str subclass is encoded by str.encode
    # itself, so an overridden encode() is never asked. Either way the library reads only the
    # bytes the object really holds.
    result = run_python(
        LIARS
        + """
from bounded_router import Router
router = Router(["http://w0:8000", "http://w1:8000"])
try:
    %s
except (TypeError, ValueError) as e:
    print("refused:", e)
else:
    print("accepted", sorted(router.loads().items()))
"""
        % CALLS[call],
        tmp_path,
    )
    assert result.returncode == 0, (result.returncode, result.stderr[-2000:])
    out = result.stdout.strip()
    if "LongBytes" in CALLS[call]:
        assert out.startswith("refused:") and "length" in out, out
    else:  # a str subclass is plain text: the call does what it does with a str
        loads = {  # the lease of route_str and acquire_url is dropped at once: back to 0
            "route_str": "[('http://w0:8000', 0), ('http://w1:8000', 0)]",
            "acquire_url": "[('http://w0:8000', 0), ('http://w1:8000', 0)]",
            "add_worker": "[('http://w0:8000', 0), ('http://w1:8000', 0), ('http://w9:8000', 0)]",
            "remove_worker": "[('http://w1:8000', 0)]",
            "set_healthy": "[('http://w0:8000', 0), ('http://w1:8000', 0)]",
        }[call]
        assert out == "accepted " + loads, out


def test_str_subclass_is_encoded_by_str_itself(make_router):
    class Sneaky(str):
        def encode(self, *args, **kwargs):  # never called
            raise AssertionError("encode() of a str subclass must not be used")

    router = make_router(2)
    expected = ReferenceRouter(urls(2)).preferred(b"session-1")
    with router.route(Sneaky("session-1")) as lease:
        assert lease.worker_url == expected
    router.add_worker(Sneaky("http://w9:8000"))
    assert "http://w9:8000" in router.loads()


# -- rings too large for memory ------------------------------------------------------------------


def test_workers_times_virtual_nodes_is_bounded(tmp_path):
    # 20,000 workers x 65,536 virtual nodes is 1.3 billion ring entries: the library refuses the
    # configuration instead of running out of memory.
    result = run_python(
        """
from bounded_router import Router
urls = ["http://w%d:8000" % i for i in range(20000)]
try:
    Router(urls, virtual_nodes=65536)
except ValueError as e:
    print("refused:", e)
"""
        ,
        tmp_path,
    )
    assert result.returncode == 0, (result.returncode, result.stderr[-2000:])
    assert result.stdout.startswith("refused:"), result.stdout
    assert "virtual_nodes" in result.stdout and "4194304" in result.stdout, result.stdout


def test_membership_changes_respect_the_ring_bound():
    limit = 1 << 22
    per_worker = 65536
    fitting = ["http://w%d:8000" % i for i in range(limit // per_worker)]
    with Router(fitting[:1], virtual_nodes=per_worker) as router:
        with pytest.raises(ValueError, match="4194304"):
            router.set_workers(fitting + ["http://one-too-many"])
        assert list(router.loads()) == fitting[:1]


# -- copies and pickles --------------------------------------------------------------------------


@pytest.mark.parametrize("operation", [copy.copy, copy.deepcopy, pickle.dumps])
def test_routers_cannot_be_copied_or_pickled(make_router, operation):
    router = make_router(2)
    with pytest.raises(TypeError, match="Router"):
        operation(router)
    assert not router.closed
    assert router.route("k").release() is True


@pytest.mark.parametrize("operation", [copy.copy, copy.deepcopy, pickle.dumps])
def test_leases_cannot_be_copied_or_pickled(make_router, operation):
    router = make_router(2)
    lease = router.route("k")
    with pytest.raises(TypeError, match="Lease"):
        operation(lease)
    assert router.active_leases() == 1
    assert lease.release() is True
    assert lease.release() is False
    assert router.active_leases() == 0


# -- header lists --------------------------------------------------------------------------------


@pytest.mark.parametrize("headers", [["ab"], [b"ab"], [("a", "b"), "cd"], [["x-smg-routing-key", "k", "extra"]]])
def test_header_items_must_be_name_value_pairs(make_router, headers):
    router = make_router(2)
    with pytest.raises(TypeError, match="pair"):
        router.route(headers=headers)
    with pytest.raises(TypeError, match="pair"):
        router.select(headers=headers)
    assert router.active_leases() == 0


# -- the C API, called directly ------------------------------------------------------------------

BR_ERR_INVALID_ARGUMENT = -2


@pytest.fixture(scope="module")
def capi():
    return c_api()


def new_router(capi, config: bytes) -> int:
    handle = c_uint64()
    status = capi.br_router_new(config, len(config), ctypes.byref(handle))
    return status if status < 0 else handle.value


def error_text(capi) -> str:
    return capi.br_last_error().decode()


@pytest.fixture
def handle(capi):
    h = new_router(capi, b'{"worker_urls": ["http://w0:8000", "http://w1:8000"]}')
    assert h > 0
    yield h
    capi.br_router_free(h)


def member_urls(capi, h) -> bytes:
    buffer = ctypes.create_string_buffer(4096)
    n = capi.br_workers_json(h, buffer, 4096)
    assert 0 < n <= 4096
    return buffer.raw[:n]


def test_set_workers_null_is_not_an_empty_list(capi, handle):
    assert capi.br_set_workers(handle, b"null", 4) == BR_ERR_INVALID_ARGUMENT
    assert "array" in error_text(capi)
    assert b"http://w0:8000" in member_urls(capi, handle)


@pytest.mark.parametrize(
    "config, field",
    [
        (b'{"WORKER_URLS": ["http://w0"]}', "WORKER_URLS"),
        (b'{"worker_urls": ["http://w0"], "Virtual_Nodes": 3}', "Virtual_Nodes"),
        (b'{"worker_urls": [], "policy": {"type": "bounded_consistent_hashing", "MAX_LOAD_SKEW": 7}}', "MAX_LOAD_SKEW"),
        (b'{"worker_urls": [], "policy": {"TYPE": "random"}}', "TYPE"),
    ],
)
def test_json_keys_match_exactly(capi, config, field):
    assert new_router(capi, config) == BR_ERR_INVALID_ARGUMENT
    assert field in error_text(capi)


@pytest.mark.parametrize("escape", [rb"\ud800", rb"\udc00", rb"\ud800\u0041", rb"x\udfffy"])
def test_lone_surrogate_escapes_are_refused(capi, handle, escape):
    config = b'{"worker_urls": ["http://' + escape + b'"]}'
    assert new_router(capi, config) == BR_ERR_INVALID_ARGUMENT
    assert "surrogate" in error_text(capi)
    assert capi.br_set_workers(handle, b'["http://' + escape + b'"]', len(escape) + 11) == BR_ERR_INVALID_ARGUMENT
    assert "surrogate" in error_text(capi)


def test_escaped_surrogate_pairs_and_backslashes_are_accepted(capi):
    h = new_router(capi, rb'{"worker_urls": ["http://\ud83d\ude00", "http://a/\\ud800"]}')
    assert h > 0, error_text(capi)
    try:
        assert "http://\U0001F600".encode() in member_urls(capi, h)
    finally:
        capi.br_router_free(h)


def test_null_pointer_with_a_length_is_refused(capi, handle):
    out = (c_uint64 * 3)()
    assert capi.br_route_key(handle, None, 5, out) == BR_ERR_INVALID_ARGUMENT
    assert "key" in error_text(capi) and "NULL" in error_text(capi)
    assert capi.br_acquire(handle, b"http://w0:8000", 14, None, 3, 0, out) == BR_ERR_INVALID_ARGUMENT
    assert "key" in error_text(capi)
    assert capi.br_add_worker(handle, None, 4) == BR_ERR_INVALID_ARGUMENT
    assert "url" in error_text(capi)
    assert capi.br_route(handle, None, 0, None, 8, 1, out) == BR_ERR_INVALID_ARGUMENT
    assert "headers" in error_text(capi)
    assert b'"load":0' in member_urls(capi, handle) and b'"load":1' not in member_urls(capi, handle)


@pytest.mark.parametrize("length", [2**64 - 1, 2**63, 2**40])
def test_impossible_lengths_are_invalid_arguments(capi, handle, length):
    out = (c_uint64 * 3)()
    assert capi.br_route_key(handle, b"k", length, out) == BR_ERR_INVALID_ARGUMENT
    assert "key_len" in error_text(capi)
    assert "please report" not in error_text(capi)
    assert capi.br_add_worker(handle, b"http://x", length) == BR_ERR_INVALID_ARGUMENT
    assert "url_len" in error_text(capi)


def test_null_out_is_not_a_configuration_error(capi, handle):
    assert capi.br_route_key(handle, b"k", 1, None) == BR_ERR_INVALID_ARGUMENT
    text = error_text(capi)
    assert "out" in text and "NULL" in text and "configuration" not in text
