"""Worker failures: the settings of the health check, the circuit breaker and retries
(docs/contract.md, "Worker failures").

The state machines run in the native library: probes on its own threads, the breaker fed by
the outcomes leases are released with (:meth:`Lease.release <bounded_router.Lease.release>`,
:meth:`Lease.fail <bounded_router.Lease.fail>`). The names and defaults are SMG's flags', except
the probe interval (1 s, not 60: a dead worker is flagged within seconds) and the breaker's
(5 failures in a row, back on trial after 10 s). The library checks every value and names the
flag in its error.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, Optional, Union

__all__ = [
    "HealthCheckConfig",
    "CircuitBreakerConfig",
    "RetryConfig",
    "OUTCOMES",
    "DEFAULT_RETRY_MAX_RETRIES",
]

# How a request ended on its worker, in the library's code order (BR_OUTCOME_*).
OUTCOMES = ("success", "failure", "pushback", "neutral")

# Two more workers after a failure before the first byte (the gateway's default too).
DEFAULT_RETRY_MAX_RETRIES = 2


@dataclass(frozen=True)
class HealthCheckConfig:
    """Active health checks: ``GET <worker URL><endpoint>`` every ``interval_secs``, each given
    ``timeout_secs``; ``failure_threshold`` failed probes in a row make a worker unavailable
    (``unhealthy_probe``), ``success_threshold`` good ones available again. A worker set
    unhealthy with :meth:`Router.set_healthy <bounded_router.Router.set_healthy>` stays so
    whatever the probes say.
    """

    endpoint: str = "/health"
    interval_secs: float = 1.0
    timeout_secs: float = 1.0
    failure_threshold: int = 3
    success_threshold: int = 2

    def to_dict(self) -> Dict[str, Any]:
        """The library's ``health_check`` form."""
        return {
            "endpoint": self.endpoint,
            "interval_secs": self.interval_secs,
            "timeout_secs": self.timeout_secs,
            "failure_threshold": self.failure_threshold,
            "success_threshold": self.success_threshold,
        }


@dataclass(frozen=True)
class CircuitBreakerConfig:
    """Passive ejection: after ``failure_threshold`` failed requests in a row a worker is
    ejected for ``timeout_duration_secs``, then half-open (routable, no spill target) until
    ``success_threshold`` successes in a row; a failure while half-open ejects it again.
    """

    failure_threshold: int = 5
    success_threshold: int = 2
    timeout_duration_secs: float = 10.0

    def to_dict(self) -> Dict[str, Any]:
        """The library's ``circuit_breaker`` form."""
        return {
            "failure_threshold": self.failure_threshold,
            "success_threshold": self.success_threshold,
            "timeout_duration_secs": self.timeout_duration_secs,
        }


@dataclass(frozen=True)
class RetryConfig:
    """Failover before the first byte, for the proxies: a request its worker failed before any
    byte of the answer reached the client is sent again, up to ``max_retries`` more times, each
    time to a worker not yet tried (the key's next ring worker for a keyed request).
    ``max_retries=0`` sends every request once.
    """

    max_retries: int = DEFAULT_RETRY_MAX_RETRIES

    def __post_init__(self) -> None:
        if isinstance(self.max_retries, bool) or not isinstance(self.max_retries, int) or not 0 <= self.max_retries <= 16:
            raise ValueError("retry_max_retries must be an integer from 0 to 16, got %r" % (self.max_retries,))


def health_check_setting(value: Union[HealthCheckConfig, bool, None]) -> Optional[Dict[str, Any]]:
    """``Router(health_check=...)`` in the library's form: None or False is no probes."""
    if value is None or value is False:
        return None
    if value is True:
        return HealthCheckConfig().to_dict()
    if isinstance(value, HealthCheckConfig):
        return value.to_dict()
    raise TypeError("health_check must be a HealthCheckConfig, True, False or None, got %s" % type(value).__name__)


def circuit_breaker_setting(value: Union[CircuitBreakerConfig, bool, None]) -> Union[Dict[str, Any], bool, None]:
    """``Router(circuit_breaker=...)`` in the library's form: None is the defaults, False off."""
    if value is None or value is True:
        return None
    if value is False:
        return False
    if isinstance(value, CircuitBreakerConfig):
        return value.to_dict()
    raise TypeError("circuit_breaker must be a CircuitBreakerConfig, True, False or None, got %s" % type(value).__name__)
