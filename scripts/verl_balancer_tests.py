"""Run verl's own load-balancer tests with bounded-router's balancer in place of verl's.

Not part of CI: it needs verl (and Ray) installed, and a checkout of verl's tests
(github.com/verl-project/verl). It puts ``bounded_router.integrations.verl.BoundedRequestLoadBalancer``
wherever verl defines ``GlobalRequestLoadBalancer`` before the tests import it, in the form that
verl has there (the class, or a Ray actor class where verl's own is one), then runs the tests that
``-k`` selects (verl's are in tests/experimental/agent_loop/test_basic_agent_loop.py)::

    .venv/bin/python scripts/verl_balancer_tests.py --verl-tests ~/src/verl/tests -k "LoadBalancer"

Tests that assert verl's own placement rule (a new request to the least loaded server, ties to
the first) can fail by design: the bounded balancer sends a new id to its ring server and moves
ids only past the bound (docs/contract.md, "Ties by the key"). Stickiness and release accounting
are the same, and release_server of a server unknown or idle does nothing, as verl's.
"""

from __future__ import annotations

import argparse
import importlib
import os
import subprocess
import sys
import tempfile

#: Where verl versions define the balancer: since v0.8.0, and in v0.7.1.
MODULES = ("verl.workers.rollout.llm_server", "verl.experimental.agent_loop.agent_loop")

PLUGIN = '''
import importlib

from bounded_router.integrations.verl import BoundedRequestLoadBalancer


def pytest_configure(config):
    for name in %r:
        try:
            module = importlib.import_module(name)
        except ImportError:
            continue
        if not hasattr(module, "GlobalRequestLoadBalancer"):
            continue
        if hasattr(module.GlobalRequestLoadBalancer, "remote"):
            # verl v0.7.1, v0.8.0: an actor class, built with GlobalRequestLoadBalancer.remote(...)
            import ray

            module.GlobalRequestLoadBalancer = ray.remote(BoundedRequestLoadBalancer)
        else:
            # verl v0.9.0 (since c6dd5b50a): a plain class, that verl and its tests wrap with ray.remote
            module.GlobalRequestLoadBalancer = BoundedRequestLoadBalancer
        print("bounded-router: GlobalRequestLoadBalancer of %%s replaced" %% name)
''' % (MODULES,)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--verl-tests", required=True, help="verl's tests directory (or one test file)")
    parser.add_argument("-k", default="load_balancer or LoadBalancer or balancer", help="pytest -k expression")
    args = parser.parse_args()
    try:
        importlib.import_module("verl")
        importlib.import_module("ray")
    except ImportError as e:
        print("verl and ray must be installed to run verl's tests: %s" % e, file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory() as plugins:
        with open(os.path.join(plugins, "bounded_verl_plugin.py"), "w") as f:
            f.write(PLUGIN)
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [plugins, os.environ.get("PYTHONPATH")])))
        command = [sys.executable, "-m", "pytest", "-p", "bounded_verl_plugin", "-k", args.k, args.verl_tests]
        return subprocess.call(command, env=env)


if __name__ == "__main__":
    sys.exit(main())
