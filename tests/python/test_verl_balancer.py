"""bounded_router.integrations.verl: verl's acquire_server / release_server on a bounded router.
Every expected placement is computed by the reference model (tests/reference_model.py) with the
balancer's policy, replaying the same acquires and releases."""

from __future__ import annotations

import importlib.util
import inspect
import os
import subprocess
import sys
import types
from collections import Counter
from typing import Any, Dict, List

import pytest

from bounded_router.integrations.verl import DEFAULT_ROUTING_CACHE_SIZE, BoundedRequestLoadBalancer, server_url
from reference_model import ReferenceRouter

SERVERS = ["replica-%d" % i for i in range(4)]


def model(servers: List[str], **options) -> ReferenceRouter:
    settings = dict(spill_target="least_loaded", key_memory=DEFAULT_ROUTING_CACHE_SIZE)
    settings.update(options)
    return ReferenceRouter([server_url(s) for s in servers], policy="bounded_consistent_hashing", **settings)


class Replay:
    """The balancer and the model fed the same acquires (held until released by server id)."""

    def __init__(self, servers: List[str], **options) -> None:
        self.balancer = BoundedRequestLoadBalancer({s: "handle-" + s for s in servers}, **options)
        config = {k: v for k, v in options.items() if k in ("max_load_skew", "min_load_gap", "key_memory")}
        self.model = model(servers, **config)
        self.key_fn = options.get("key_fn")
        self.held: Dict[str, List[int]] = {s: [] for s in servers}

    def acquire(self, request_id: str) -> str:
        server, handle = self.balancer.acquire_server(request_id)
        assert handle == "handle-" + server
        key = request_id if self.key_fn is None else self.key_fn(request_id)
        decision = self.model.route(key)
        assert server_url(server) == decision.worker_url, "request %s: balancer %s, model %s" % (request_id, server, decision.worker_url)
        self.held[server].append(decision.lease_id)
        return server

    def release(self, server: str) -> None:
        self.balancer.release_server(server)
        self.model.release(self.held[server].pop())


def test_a_request_id_keeps_its_server_over_turns() -> None:
    replay = Replay(SERVERS)
    first = {rid: replay.acquire(rid) for rid in ("conv-%d" % i for i in range(6))}
    for rid, server in first.items():
        replay.release(server)
    for _ in range(3):
        for rid, server in first.items():
            assert replay.acquire(rid) == server
            replay.release(server)


def test_a_turn_spills_when_its_server_is_clearly_overloaded_and_stays_there() -> None:
    replay = Replay(SERVERS, min_load_gap=2)
    home = replay.acquire("conv")
    replay.release(home)
    others = ["busy-%d" % i for i in range(200)]
    busy = [rid for rid in others if replay.model.preferred(rid.encode()) == server_url(home)][:3]
    for rid in busy:  # three more in flight on conv's server: gap 3 > 2 and 3 > 1.5 * 0.75
        assert replay.acquire(rid) == home
    moved = replay.acquire("conv")
    assert moved != home, "conv stayed on its overloaded server"
    assert replay.balancer.router.branch_counts()["explicit_routing_key_spillover"] == 1
    replay.release(moved)
    for _ in busy:
        replay.release(home)
    assert replay.acquire("conv") == moved, "the key remembers where it spilled"


def test_grpo_siblings_share_a_group_key_and_the_bound_spreads_them() -> None:
    replay = Replay(SERVERS, key_fn=lambda rid: rid.split("/")[0])
    placed = [replay.acquire("prompt-7/sample-%d" % i) for i in range(8)]  # all 8 in flight at once
    assert len(set(placed)) > 1, "a hot group stayed on one server: %r" % placed
    assert Counter(placed).most_common(1)[0][1] < 8
    for server in placed:
        replay.release(server)


def test_release_accounting_leaves_nothing_held() -> None:
    replay = Replay(SERVERS)
    servers = [replay.acquire("r-%d" % (i % 10)) for i in range(50)]
    for server in servers:
        replay.release(server)
    router = replay.balancer.router
    assert router.active_leases() == 0 and router.leaked_leases() == 0
    assert all(n == 0 for n in replay.balancer.get_status()["inflight"].values())


def test_a_burst_of_new_ids_spreads_over_an_idle_fleet() -> None:
    servers = ["replica-%d" % i for i in range(8)]
    replay = Replay(servers)
    placed = []
    for i in range(64):
        server = replay.acquire("new-%d" % i)
        placed.append(server)
        replay.release(server)
    counts = Counter(placed)
    assert max(counts.values()) <= 2 * 64 / 8, counts
    assert len(counts) == 8


def test_removed_servers_still_release_and_take_no_new_requests() -> None:
    balancer = BoundedRequestLoadBalancer({s: None for s in SERVERS}, return_handle=True)
    server, handle = balancer.acquire_server("conv")
    assert handle is None
    balancer.remove_servers([server])
    assert server not in balancer.get_all_servers()
    assert all(balancer.acquire_server("x-%d" % i)[0] != server for i in range(20))
    balancer.release_server(server)
    balancer.release_server(server)  # its last request released already: nothing happens
    balancer.add_servers({server: "again"})
    assert balancer.get_all_servers()[-1] == server
    status = balancer.get_status()
    assert status["active_leases"] == 20 and status["leaked_leases"] == 0


def test_settings_from_a_config_dict() -> None:
    balancer = BoundedRequestLoadBalancer(SERVERS, {"max_cache_size": 7, "min_load_gap": 4, "full_determinism": False})
    policy = balancer.router.policy
    assert (policy.key_memory, policy.min_load_gap, policy.spill_target) == (7, 4, "least_loaded")
    assert BoundedRequestLoadBalancer(SERVERS, {"min_load_gap": 4}, min_load_gap=1).router.policy.min_load_gap == 1


def test_importing_it_imports_no_verl_nor_ray() -> None:
    code = "import sys, bounded_router.integrations.verl; print(sorted(m for m in ('verl', 'ray', 'omegaconf') if m in sys.modules))"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip() == "[]"


def test_constructed_as_each_verl_version_constructs_its_balancer() -> None:
    by_dict = BoundedRequestLoadBalancer(servers={"a": 1, "b": 2}, max_cache_size=10)
    by_ids = BoundedRequestLoadBalancer(server_actor_ids=["a", "b"])
    assert by_dict.get_all_servers() == by_ids.get_all_servers() == ["a", "b"]
    assert by_dict.router.policy.key_memory == 10 and by_ids.router.policy.key_memory == DEFAULT_ROUTING_CACHE_SIZE


def test_the_example_runs_without_verl() -> None:
    import os

    example = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "examples", "verl_balancer.py")
    out = subprocess.run([sys.executable, example], capture_output=True, text=True, check=True).stdout
    assert "leaked: 0" in out and "'replica-0': 0" in out.splitlines()[-1]


def test_a_server_added_again_releases_its_earlier_requests_first() -> None:
    # Regression (found by an audit): release_server released the latest lease of the id, so
    # after the server left and came back, the first request of the earlier server to finish
    # took a request off the new one and left its own lease on the removed worker.
    balancer = BoundedRequestLoadBalancer(SERVERS[:1])
    server = balancer.acquire_server("before")
    balancer.remove_servers([server])
    balancer.add_servers([server])
    assert balancer.acquire_server("after") == server
    balancer.release_server(server)  # the request from before the removal finished
    assert balancer.router.loads() == {server_url(server): 1}, "the new server still holds its request"
    balancer.release_server(server)
    assert balancer.router.loads() == {server_url(server): 0} and balancer.router.active_leases() == 0


def test_get_status_while_servers_join_and_leave() -> None:
    # Regression (found by a review): get_status read the router's statistics without the lock,
    # so a server add_servers had added to the router but not yet named raised KeyError. The
    # balancer is documented as safe to share between threads.
    import threading

    balancer = BoundedRequestLoadBalancer(["s0"])
    errors: List[BaseException] = []
    stop = threading.Event()

    def churn() -> None:
        for i in range(3000):
            if stop.is_set():
                break
            balancer.add_servers(["n%d" % i])
            balancer.remove_servers(["n%d" % i])
        stop.set()

    def status() -> None:
        try:
            while not stop.is_set():
                assert set(balancer.get_status()["inflight"]) <= {"s0"} | {"n%d" % i for i in range(3000)}
        except BaseException as e:  # noqa: B902 - reported below
            errors.append(e)
            stop.set()

    threads = [threading.Thread(target=churn), threading.Thread(target=status)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    balancer.close()
    assert not any(t.is_alive() for t in threads)
    assert errors == []


def test_removed_servers_are_forgotten() -> None:
    # Regression (found by a review): the map of server URLs to ids kept every server ever
    # removed, so a balancer whose servers churn grew without bound.
    balancer = BoundedRequestLoadBalancer(["s0"])
    for i in range(2000):
        balancer.add_servers(["churn-%d" % i])
        balancer.remove_servers(["churn-%d" % i])
    assert balancer.get_all_servers() == ["s0"]
    assert (len(balancer._held), len(balancer._handles), len(balancer._ids)) == (1, 1, 1)
    balancer.close()


def test_acquire_returns_the_server_and_its_handle_as_verl_unpacks_them() -> None:
    # Regression (found by a review): verl's LLMServerClient._acquire_server does
    # `server_id, handle = await balancer.acquire_server.remote(request_id=...)`, and its
    # LLMServerManager passes servers={address: handle}; the id alone came back unless
    # return_handle=True.
    handles = {s: object() for s in SERVERS}
    balancer = BoundedRequestLoadBalancer(servers=handles, max_cache_size=DEFAULT_ROUTING_CACHE_SIZE)
    server_id, handle = balancer.acquire_server(request_id="conv")
    assert handle is handles[server_id]
    # Older shapes: ids without handles (verl v0.7.1's server_actor_ids) get the id alone.
    assert balancer.acquire_server("conv") == (server_id, handle)
    assert isinstance(BoundedRequestLoadBalancer(server_actor_ids=SERVERS).acquire_server("conv"), str)
    assert isinstance(BoundedRequestLoadBalancer(SERVERS).acquire_server("conv"), str)
    assert isinstance(BoundedRequestLoadBalancer(handles, return_handle=False).acquire_server("conv"), str)
    assert BoundedRequestLoadBalancer(SERVERS, return_handle=True).acquire_server("conv")[1] is None


def test_full_determinism_routes_each_id_to_its_ring_server_whatever_the_load() -> None:
    # Regression (found by a review): verl's LLMServerManager builds its balancer with
    # full_determinism=<rollout config> (route by the request id alone, bypassing load, so runs
    # reproduce); the keyword raised TypeError. It is honoured by strict consistent hashing.
    servers = {s: None for s in SERVERS}
    ring = ReferenceRouter([server_url(s) for s in SERVERS], policy="consistent_hashing")
    ids = ["prompt-%d/sample-%d" % (p, s) for p in range(8) for s in range(4)]
    first = BoundedRequestLoadBalancer(servers=servers, max_cache_size=DEFAULT_ROUTING_CACHE_SIZE, full_determinism=True)
    hot = [first.acquire_server(request_id=ids[0])[0] for _ in range(12)]  # held: the bound would spill
    assert set(hot) == {hot[0]} and server_url(hot[0]) == ring.preferred(ids[0].encode())
    placed = {rid: first.acquire_server(request_id=rid)[0] for rid in ids}
    assert all(server_url(placed[rid]) == ring.preferred(rid.encode()) for rid in ids)
    second = BoundedRequestLoadBalancer(servers, {"full_determinism": True})  # another run, another order
    assert {rid: second.acquire_server(rid)[0] for rid in reversed(ids)} == placed
    assert first.router.policy.policy_type.value == "consistent_hashing"
    off = BoundedRequestLoadBalancer(servers=servers, max_cache_size=10, full_determinism=False)
    assert off.router.policy.policy_type.value == "bounded_consistent_hashing"
    with pytest.raises(ValueError, match="full_determinism must be a bool"):
        BoundedRequestLoadBalancer(servers, full_determinism="yes")  # type: ignore[arg-type]


def test_an_empty_pool_takes_servers_later() -> None:
    # Regression (found by a review): verl allows an empty initial pool (dynamic resource
    # scheduling registers every replica later with add_servers); "servers must be non-empty"
    # was raised. With no server, acquire raises as verl's balancer does.
    balancer = BoundedRequestLoadBalancer(servers={}, max_cache_size=DEFAULT_ROUTING_CACHE_SIZE)
    assert balancer.get_all_servers() == []
    with pytest.raises(RuntimeError, match="^No available servers in load balancer$"):
        balancer.acquire_server(request_id="r0")
    balancer.add_servers({"s0": "h0"})
    assert balancer.acquire_server(request_id="r0") == ("s0", "h0")
    balancer.release_server("s0")
    balancer.remove_servers(["s0"])
    with pytest.raises(RuntimeError, match="^No available servers in load balancer$"):
        balancer.acquire_server(request_id="r0")
    assert balancer.router.active_leases() == 0
    nothing = BoundedRequestLoadBalancer()  # no servers given at all: today's verl shape still
    assert nothing.get_all_servers() == []
    nothing.add_servers({"s0": "h0"})
    assert nothing.acquire_server(request_id="r0") == ("s0", "h0")


def test_releasing_an_unknown_or_idle_server_does_nothing() -> None:
    # Regression (found by a review): verl's release_server returns silently for a server it
    # does not know (since verl d324b014d: hybrid replicas leave while their requests finish)
    # and does nothing for one with nothing in flight; ValueError was raised here.
    balancer = BoundedRequestLoadBalancer({s: None for s in SERVERS})
    assert balancer.release_server(server_id="nope") is None
    assert balancer.release_server(server_id="replica-0") is None
    server, _ = balancer.acquire_server("conv")
    balancer.release_server(server)
    balancer.release_server(server)  # once more than acquired
    balancer.remove_servers([server])
    balancer.release_server(server)  # removed, nothing in flight
    assert balancer.router.active_leases() == 0 and balancer.router.leaked_leases() == 0
    again, _ = balancer.acquire_server("conv")
    assert balancer.router.active_leases() == 1  # the release before did not take it
    balancer.release_server(again)
    assert balancer.router.active_leases() == 0


def test_the_surface_verl_calls_today() -> None:
    # Regression (found by a review): verl calls clear_sticky_cache() and get_total_inflight()
    # (fully_async_rollouter, trainer_separate_async), has get_inflight_count(server_id), and
    # get_status() returns servers / total_inflight / active_servers / registered_handles; the
    # first three were missing and get_status had other keys.
    balancer = BoundedRequestLoadBalancer(servers={s: None for s in SERVERS}, max_cache_size=DEFAULT_ROUTING_CACHE_SIZE)
    placed = [balancer.acquire_server(request_id="r-%d" % i)[0] for i in range(6)]
    counts = {s: placed.count(s) for s in SERVERS}
    assert all(balancer.get_inflight_count(server_id=s) == counts[s] for s in SERVERS)
    assert balancer.get_inflight_count(server_id="nope") == 0
    assert balancer.get_total_inflight() == 6
    assert balancer.get_all_servers() == SERVERS
    status = balancer.get_status()
    assert {k: status[k] for k in ("servers", "total_inflight", "active_servers", "registered_handles")} == {
        "servers": counts,
        "total_inflight": 6,
        "active_servers": 4,
        "registered_handles": SERVERS,
    }
    assert balancer.clear_sticky_cache() == {"cleared_entries": 6, "server_loads": counts}
    assert balancer.clear_sticky_cache() == {"cleared_entries": 0, "server_loads": counts}
    balancer.remove_servers([placed[0]])  # verl counts only the servers in the pool
    assert balancer.get_total_inflight() == 6 - counts[placed[0]]
    assert balancer.get_inflight_count(placed[0]) == 0 and placed[0] not in balancer.get_status()["servers"]


def test_clear_sticky_cache_forgets_where_ids_went_and_leases_still_release() -> None:
    balancer = BoundedRequestLoadBalancer({s: None for s in SERVERS}, min_load_gap=2)
    ring = model(SERVERS, min_load_gap=2)
    home, _ = balancer.acquire_server("conv")
    balancer.release_server(home)
    busy = [rid for rid in ("busy-%d" % i for i in range(200)) if ring.preferred(rid.encode()) == server_url(home)][:3]
    for rid in busy:
        assert balancer.acquire_server(rid)[0] == home
    moved, _ = balancer.acquire_server("conv")  # spills and is remembered there
    assert moved != home
    balancer.release_server(moved)
    for _ in busy:
        balancer.release_server(home)
    assert balancer.acquire_server("conv")[0] == moved
    balancer.release_server(moved)
    held = [balancer.acquire_server("held-%d" % i)[0] for i in range(3)]  # in flight across the clear
    loads = balancer.router.loads()
    result = balancer.clear_sticky_cache()
    assert result["cleared_entries"] == 1 + len(busy) + 3
    assert result["server_loads"] == {s: held.count(s) for s in SERVERS}
    assert balancer.router.loads() == loads, "clearing changed the loads"
    assert balancer.acquire_server("conv")[0] == home, "conv still went where it was remembered"
    balancer.release_server(home)
    for server in held:
        balancer.release_server(server)
    stats = balancer.router.statistics()
    assert stats.active_leases == 0 and stats.leaked_leases == 0
    assert all(w.healthy and w.condition == "available" for w in stats.workers)


def test_clear_sticky_cache_counts_the_ids_the_router_still_remembers() -> None:
    balancer = BoundedRequestLoadBalancer(SERVERS, key_memory=5)
    placed = {}
    for i in range(8):  # 8 ids through a memory of 5: the 3 least recently routed are forgotten
        placed["r-%d" % i] = balancer.acquire_server("r-%d" % i)
        balancer.release_server(placed["r-%d" % i])
    balancer.remove_servers([placed["r-7"]])
    # The 5 ids remembered, those on the server removed since included: verl's LRU keeps them
    # too until they are next looked up (llm_server.py, remove_servers leaves it untouched).
    assert balancer.clear_sticky_cache()["cleared_entries"] == 5
    assert BoundedRequestLoadBalancer(SERVERS, key_memory=0).clear_sticky_cache()["cleared_entries"] == 0
    deterministic = BoundedRequestLoadBalancer(SERVERS, full_determinism=True)
    deterministic.acquire_server("r")
    assert deterministic.clear_sticky_cache()["cleared_entries"] == 0  # it remembers nothing


# verl and Ray are not installed here: the tests below stand in for them with the few lines of
# verl (verl-project/verl, verl/workers/rollout/llm_server.py) that build the balancer.

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


class FakeActorClass:
    """What ``ray.remote(cls)`` returns: an object, not a class, built with ``.remote(...)``."""

    def __init__(self, cls: type) -> None:
        self.cls = cls

    def remote(self, **kwargs: Any) -> Any:
        return self.cls(**kwargs)


def fake_ray_remote(cls: Any) -> FakeActorClass:
    if not inspect.isclass(cls):  # as Ray: @ray.remote applies to a function or a class
        raise TypeError("The @ray.remote decorator must be applied to either a function or a class.")
    return FakeActorClass(cls)


def verl_today_builds_its_balancer(module: Any, load_balancer_cls: Any = None, full_determinism: bool = False) -> Any:
    """LLMServerManager.__init__ and _init_global_load_balancer of verl since c6dd5b50a."""
    cls = load_balancer_cls or module.GlobalRequestLoadBalancer
    kwargs: Dict[str, Any] = dict(servers={"10.0.0.1:8000": "h1", "10.0.0.2:8000": "h2"}, max_cache_size=10000)
    if cls is module.GlobalRequestLoadBalancer:
        kwargs["full_determinism"] = full_determinism
    return fake_ray_remote(cls).remote(**kwargs)


def load(path: str, name: str) -> Any:
    spec = importlib.util.spec_from_file_location(name, os.path.join(REPO, path))
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def fake_ray(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "ray", types.SimpleNamespace(remote=fake_ray_remote))


def test_patch_verl_installs_a_class_that_verl_today_wraps_itself(fake_ray: None) -> None:
    # Regression (found by a review): patch_verl installed ray.remote(...) of the balancer, and
    # verl since c6dd5b50a (v0.9.0) calls ray.remote() on the class it finds, which Ray refuses
    # for an actor class.
    example = load("examples/verl_balancer.py", "verl_balancer_example")
    llm_server = types.ModuleType("llm_server")
    llm_server.GlobalRequestLoadBalancer = type("GlobalRequestLoadBalancer", (), {})  # type: ignore[attr-defined]
    example.patch_verl(llm_server, min_load_gap=3)
    balancer = verl_today_builds_its_balancer(llm_server, full_determinism=True)
    assert isinstance(balancer, BoundedRequestLoadBalancer)
    assert balancer.router.policy.policy_type.value == "consistent_hashing"  # verl's flag reached it
    assert balancer.acquire_server(request_id="r")[1] in ("h1", "h2")
    balancer = verl_today_builds_its_balancer(llm_server)
    assert balancer.router.policy.min_load_gap == 3
    # The other way in: LLMServerManager(load_balancer_cls=...), which gets no full_determinism.
    by_class = verl_today_builds_its_balancer(llm_server, load_balancer_cls=example.bounded_balancer_class(key_memory=7))
    assert by_class.router.policy.key_memory == 7


def test_patch_verl_installs_an_actor_class_for_verl_that_calls_remote_on_it(fake_ray: None) -> None:
    # verl v0.7.1 to c6dd5b50a: the balancer is a @ray.remote class built with .remote(...),
    # v0.7.1 with server_actor_ids (in agent_loop.py), v0.8.0 with servers={address: handle}.
    example = load("examples/verl_balancer.py", "verl_balancer_example")
    agent_loop = types.ModuleType("agent_loop")
    agent_loop.GlobalRequestLoadBalancer = fake_ray_remote(type("GlobalRequestLoadBalancer", (), {}))  # type: ignore[attr-defined]
    example.patch_verl(agent_loop)
    v071 = agent_loop.GlobalRequestLoadBalancer.remote(server_actor_ids=["a", "b"], max_cache_size=10000)  # type: ignore[attr-defined]
    assert v071.acquire_server(request_id="r") in ("a", "b")
    v080 = agent_loop.GlobalRequestLoadBalancer.remote(servers={"a": 1, "b": 2}, max_cache_size=10000)  # type: ignore[attr-defined]
    assert v080.acquire_server(request_id="r")[1] in (1, 2)


def test_the_script_puts_the_balancer_where_verl_s_tests_look_for_it(fake_ray: None, monkeypatch: pytest.MonkeyPatch) -> None:
    # Regression (found by a review), as for patch_verl: the script's plugin installed an actor
    # class, and verl's tests today do ray.remote(GlobalRequestLoadBalancer).remote(servers=...).
    script = load("scripts/verl_balancer_tests.py", "verl_balancer_tests_script")
    llm_server = types.ModuleType("verl.workers.rollout.llm_server")
    llm_server.GlobalRequestLoadBalancer = type("GlobalRequestLoadBalancer", (), {})  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "verl.workers.rollout.llm_server", llm_server)
    plugin: Dict[str, Any] = {}
    exec(compile(script.PLUGIN, "bounded_verl_plugin.py", "exec"), plugin)
    plugin["pytest_configure"](None)
    lb = fake_ray_remote(llm_server.GlobalRequestLoadBalancer).remote(servers={"s0": None, "s1": None})  # type: ignore[attr-defined]
    assert isinstance(lb, BoundedRequestLoadBalancer) and lb.acquire_server(request_id="r")[0] in ("s0", "s1")


def test_a_refused_add_servers_batch_adds_nothing() -> None:
    # Regression (found by a review): servers were added one by one, so a batch refused at its
    # third id had added the first two; verl, which catches the error and skips its own
    # bookkeeping, then disagreed with the balancer ("Atomically add multiple servers", verl's
    # llm_server.py).
    balancer = BoundedRequestLoadBalancer({"s0": "h0"})
    with pytest.raises(ValueError, match="server id"):
        balancer.add_servers({"s1": "h1", "s2": "h2", "": "h3"})
    assert balancer.get_all_servers() == ["s0"]
    assert [w.url for w in balancer.router.workers()] == [server_url("s0")]


def test_a_refused_remove_servers_batch_removes_nothing() -> None:
    balancer = BoundedRequestLoadBalancer({"s0": "h0", "s1": "h1"})
    with pytest.raises(ValueError, match="server id"):
        balancer.remove_servers(["s0", 7])  # type: ignore[list-item]
    assert balancer.get_all_servers() == ["s0", "s1"]


def test_removing_a_server_not_in_the_pool_does_nothing_as_verls() -> None:
    # Regression (found by a review): KeyError; verl's remove_servers pops each id with a default,
    # so an id removed already, listed twice or never added is no error.
    balancer = BoundedRequestLoadBalancer({"s0": "h0", "s1": "h1"})
    balancer.remove_servers(["s1", "s1"])
    balancer.remove_servers(["s1", "never-added"])
    assert balancer.get_all_servers() == ["s0"]
    assert [w.url for w in balancer.router.workers()] == [server_url("s0")]


def test_adding_a_server_already_in_the_pool_takes_its_new_handle() -> None:
    # verl's add_servers overwrites an id's handle; here its requests in flight stay counted
    # (they are real leases) and the pool keeps its order.
    balancer = BoundedRequestLoadBalancer({"s0": "h0", "s1": "h1"})
    held = balancer.acquire_server("conv")
    balancer.add_servers({held[0]: "new", "s2": "h2"})
    assert balancer.get_all_servers() == ["s0", "s1", "s2"]
    assert balancer.acquire_server("conv") == (held[0], "new")
    assert balancer.get_inflight_count(held[0]) == 2
    balancer.release_server(held[0])
    balancer.release_server(held[0])
    assert balancer.router.active_leases() == 0
