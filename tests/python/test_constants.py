"""One source for the constants that cross the C boundary (docs/contract.md, "Constants shared
with the library"): the library reports them (br_constants_json), and every other place that
names them must agree: the public C header, the contract's branch table, the Python defaults and
every string literal of the package that names a branch. A branch renamed, added or moved on one
side only fails here."""

from __future__ import annotations

import ast
import ctypes
import difflib
import inspect
import os
import re

import pytest

import bounded_router
from bounded_router import BoundedConsistentHashingConfig, PolicyType, Router, RouterArgs, _encoding, _native, _request, policy

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
HEADER = os.path.join(ROOT, "capi", "bounded_router.h")
CONTRACT = os.path.join(ROOT, "docs", "contract.md")


@pytest.fixture(scope="module")
def constants():
    return _native.library().constants


@pytest.fixture(scope="module")
def header():
    """The #define NAME value lines of the public header (simple integers only)."""
    with open(HEADER) as f:
        return {name: int(value) for name, value in re.findall(r"^#define (BR_\w+) (-?\d+)\b", f.read(), re.M)}


def test_branch_codes_and_names_match_the_header(constants, header):
    from_header = {name[len("BR_BRANCH_") :].lower(): code for name, code in header.items() if name.startswith("BR_BRANCH_")}
    count = from_header.pop("count")
    assert from_header == {name: code for code, name in enumerate(constants["branches"])}
    assert count == len(constants["branches"])


def test_branch_names_match_the_contract(constants):
    with open(CONTRACT) as f:
        text = f.read()
    section = text[text.index("## Branches") :]
    section = section[: section.index("\n## ", 3)]
    assert re.findall(r"^\| `(\w+)` \|", section, re.M) == list(constants["branches"])


def test_every_branch_name_in_the_package_is_one_the_library_reports(constants):
    # A literal within a few letters of a branch name but not equal to one is a name that
    # drifted (renamed on one side only).
    names = set(constants["branches"])
    # The library's other names (a spill target "least_loaded" next to the branch "least_load").
    other_names = set(constants["spill_targets"]) | set(constants["policies"]) | set(constants["assignment_modes"])
    package = os.path.dirname(bounded_router.__file__)
    drifted = []
    for directory, _, files in os.walk(package):
        for file in files:
            if not file.endswith(".py"):
                continue
            path = os.path.join(directory, file)
            with open(path) as f:
                tree = ast.parse(f.read())
            for node in ast.walk(tree):
                if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value not in names | other_names:
                    close = difflib.get_close_matches(node.value, names, n=1, cutoff=0.85)
                    if close:
                        drifted.append("%s:%d %r (the library says %r)" % (path, node.lineno, node.value, close[0]))
    assert not drifted


def test_status_codes_abi_and_decision_layout_match_the_header(constants, header):
    assert constants["abi_version"] == header["BR_ABI_VERSION"] == _native.ABI_VERSION
    assert constants["status"] == {name[len("BR_ERR_") :].lower(): code for name, code in header.items() if name.startswith("BR_ERR_")} | {"ok": header["BR_OK"]}
    decision = constants["decision"]
    assert decision["branch_bits"] == header["BR_DECISION_BRANCH_BITS"]
    assert decision["worker_shift"] == header["BR_DECISION_WORKER_SHIFT"]
    assert decision["preferred_shift"] == header["BR_DECISION_PREFERRED_SHIFT"]
    assert decision["id_limit"] == 1 << 28 and decision["ids_dont_fit"] == 1 << 62  # the header's casts
    assert constants["limits"]["max_arg_len"] == header["BR_MAX_ARG_LEN"]


def test_python_defaults_are_the_library_defaults(constants):
    defaults = constants["defaults"]
    assert policy.DEFAULT_MAX_LOAD_SKEW == defaults["max_load_skew"]
    assert policy.DEFAULT_MIN_LOAD_GAP == defaults["min_load_gap"]
    assert policy.DEFAULT_VIRTUAL_NODES == defaults["virtual_nodes"]
    assert policy.DEFAULT_HASH_RING == defaults["hash_ring"]
    assert policy.HASH_RINGS == tuple(constants["hash_rings"])
    assert policy.SPILL_TARGETS == tuple(constants["spill_targets"])
    assert policy.SPILL_TARGETS[0] == defaults["spill_target"] and defaults["key_memory"] == 0
    assert policy.MAX_KEY_MEMORY == constants["limits"]["max_key_memory"]
    assert policy.BALANCE_BY == tuple(constants["balance_by"]) and policy.BALANCE_BY[0] == defaults["balance_by"]
    assert policy.CacheAwareConfig().hit_wait_factor == defaults["hit_wait_factor"]
    assert BoundedConsistentHashingConfig() == BoundedConsistentHashingConfig(defaults["max_load_skew"], defaults["min_load_gap"])
    args = RouterArgs()
    assert (args.policy, args.max_load_skew, args.min_load_gap, args.virtual_nodes) == (
        defaults["policy"], defaults["max_load_skew"], defaults["min_load_gap"], defaults["virtual_nodes"]
    )
    signature = inspect.signature(Router)
    assert signature.parameters["policy"].default.value == defaults["policy"]
    assert signature.parameters["virtual_nodes"].default == defaults["virtual_nodes"]
    with Router(["http://w0"]) as router:
        assert router.policy.to_dict() == {
            "type": defaults["policy"], "max_load_skew": 1.5, "min_load_gap": 2, "hash_ring": defaults["hash_ring"],
            "spill_target": defaults["spill_target"], "key_memory": defaults["key_memory"],
            "balance_by": defaults["balance_by"],
        }


def test_python_policies_limits_and_headers_are_the_library_ones(constants):
    assert [member.value for member in PolicyType] == constants["policies"]
    assert policy._MAX_MIN_LOAD_GAP == constants["limits"]["max_min_load_gap"]
    assert _encoding.ROUTING_HEADERS == {name.lower().encode() for name in constants["headers"]}


def test_request_limits_are_the_library_and_header_ones(constants):
    with open(HEADER) as f:
        shifts = dict(re.findall(r"^#define (BR_MAX_\w+) \(1 << (\d+)\)", f.read(), re.M))
    assert _request.MAX_LEASE_WEIGHT == constants["limits"]["max_lease_weight"] == 1 << int(shifts["BR_MAX_LEASE_WEIGHT"])
    assert _request.MAX_PREFIX_BLOCKS == constants["limits"]["max_prefix_blocks"] == 1 << int(shifts["BR_MAX_PREFIX_BLOCKS"])
    assert bounded_router.MAX_LEASE_WEIGHT == _request.MAX_LEASE_WEIGHT
    assert bounded_router.MAX_PREFIX_BLOCKS == _request.MAX_PREFIX_BLOCKS


def test_the_request_struct_is_the_header_one():
    # br_request field by field: name and C type, in order, against _native.BrRequest.
    c_types = {"char*": ctypes.c_char_p, "size_t": ctypes.c_size_t, "int64_t": ctypes.c_int64, "uint64_t*": ctypes.POINTER(ctypes.c_uint64)}
    with open(HEADER) as f:
        text = re.sub(r"/\*.*?\*/", " ", f.read(), flags=re.S)
    body = re.search(r"typedef struct br_request \{(.*?)\} br_request;", text, re.S).group(1)
    fields = []
    for declaration in body.split(";"):
        words = declaration.replace("const", " ").replace("*", " * ").split()
        if words:
            fields.append((words[-1], c_types["".join(words[:-1])]))
    assert fields == list(_native.BrRequest._fields_)
def test_manual_and_routing_key_header_constants_are_the_library_ones(constants):
    assert list(policy.ASSIGNMENT_MODES) == constants["assignment_modes"]
    assert policy.ASSIGNMENT_MODES[0] == constants["defaults"]["assignment_mode"]
    assert (policy.DEFAULT_MAX_KEYS, policy.MAX_KEYS) == (constants["defaults"]["max_keys"], constants["limits"]["max_keys"])
    assert list(_encoding.DEFAULT_ROUTING_KEY_HEADERS) == constants["defaults"]["routing_key_headers"]
    assert RouterArgs().routing_key_headers == constants["defaults"]["routing_key_headers"]
    assert constants["limits"]["max_routing_key_headers"] == 8


def test_each_export_is_declared_once_with_the_header_types():
    # The binding's declarations against the public header, parameter by parameter.
    c_types = {
        "uint32_t": [ctypes.c_uint32], "int32_t": [ctypes.c_int32], "int64_t": [ctypes.c_int64],
        "uint64_t": [ctypes.c_uint64], "size_t": [ctypes.c_size_t],
        "char*": [ctypes.c_char_p, ctypes.POINTER(ctypes.c_char)],
        "uint64_t*": [ctypes.POINTER(ctypes.c_uint64)], "uint32_t*": [ctypes.POINTER(ctypes.c_uint32)],
        "int64_t*": [ctypes.POINTER(ctypes.c_int64)],
        "br_request*": [ctypes.POINTER(_native.BrRequest)],
    }
    with open(HEADER) as f:
        text = re.sub(r"/\*.*?\*/", " ", f.read(), flags=re.S)
    declared = {}
    for result, name, params in re.findall(r"^([\w ]+?\s*\*?)\s*(br_\w+)\(([^)]*)\);", text, re.M | re.S):
        types = []
        for param in params.split(","):
            words = param.replace("const", " ").replace("*", " * ").split()
            if words != ["void"]:
                types.append("".join(words[:-1]))
        declared[name] = [result.replace("const", "").replace(" ", "")] + types
    assert set(_native.EXPORTS) <= set(declared)  # br_route_key is for C callers only
    for name, export in _native.EXPORTS.items():
        bound = [export.restype] + list(export.argtypes)
        assert len(bound) == len(declared[name]), name
        for c_type, ctypes_type in zip(declared[name], bound):
            assert ctypes_type in c_types[c_type], (name, c_type, ctypes_type)
