/* bounded_router.h: the C API of bounded-router (libbounded_router.so).
 *
 * Routes requests to workers by routing key with bounded consistent hashing; the contract is
 * docs/contract.md. Routers are opaque integer handles. Every function is safe to call from any
 * thread, returns a status (negative on error, see BR_ERR_*) and never lets a Go panic reach the
 * caller; br_last_error() then holds the text, per thread. Strings are passed as pointer and
 * length (not NUL-terminated); a pointer may be NULL only with a length of 0.
 *
 * This header is written by hand. `make test` checks it against the one cgo generates from
 * the Go sources in capi/ (scripts/check_header.py), and the Go code checks its constants at compile time
 * (capi/constants.go), so the three cannot drift apart. br_constants_json() reports the same
 * values at run time, for bindings that do not read C headers.
 */
#ifndef BOUNDED_ROUTER_H
#define BOUNDED_ROUTER_H

#include <stddef.h>
#include <stdint.h>

/* The version of this API; br_abi_version() returns the one the library implements. */
#define BR_ABI_VERSION 11

/* Status codes: 0 or more is success. */
#define BR_OK 0
#define BR_ERR_INVALID_HANDLE -1   /* the router was closed or never created */
#define BR_ERR_INVALID_ARGUMENT -2 /* an argument or setting breaks its rule; the text names it */
#define BR_ERR_UNKNOWN_WORKER -3   /* the URL is not a member */
#define BR_ERR_DUPLICATE_WORKER -4 /* the URL is a member already */
#define BR_ERR_INTERNAL -5         /* a bug in the library: please report the text */

/* Branch codes: the rule that decided a route (names in docs/contract.md, "Branches"). */
#define BR_BRANCH_NO_HEALTHY_WORKERS 0
#define BR_BRANCH_TARGET_WORKER_HIT 1
#define BR_BRANCH_TARGET_WORKER_MISS 2
#define BR_BRANCH_EXPLICIT_ROUTING_KEY_HIT 3
#define BR_BRANCH_EXPLICIT_ROUTING_KEY_SPILLOVER 4
#define BR_BRANCH_EXPLICIT_ROUTING_KEY_NO_ELIGIBLE_CANDIDATE 5
#define BR_BRANCH_IMPLICIT_ROUTING_KEY_HIT 6
#define BR_BRANCH_RANDOM_FALLBACK 7
#define BR_BRANCH_ROUTING_KEY_HIT 8
#define BR_BRANCH_RANDOM 9
#define BR_BRANCH_ROUND_ROBIN 10
#define BR_BRANCH_EXPLICIT_ROUTING_KEY_REMEMBERED 11
#define BR_BRANCH_POWER_OF_TWO 12
#define BR_BRANCH_LEAST_LOAD 13
#define BR_BRANCH_MANUAL_OCCUPIED_HIT 14
#define BR_BRANCH_MANUAL_OCCUPIED_MISS 15
#define BR_BRANCH_MANUAL_VACANT 16
#define BR_BRANCH_MANUAL_NO_ROUTING_KEY 17
#define BR_BRANCH_CACHE_AWARE_PREFIX_HIT 18
#define BR_BRANCH_CACHE_AWARE_KEY_HIT 19
#define BR_BRANCH_CACHE_AWARE_BALANCE 20
#define BR_BRANCH_CACHE_AWARE_NO_MATCH 21
#define BR_BRANCH_FAILOVER 22
#define BR_BRANCH_COUNT 23

/* How a request ended on its worker, for br_finish (docs/contract.md, "Worker failures"). */
#define BR_OUTCOME_SUCCESS 0
#define BR_OUTCOME_FAILURE 1
#define BR_OUTCOME_PUSHBACK 2
#define BR_OUTCOME_NEUTRAL 3
#define BR_OUTCOME_COUNT 4

/* Packed decisions (answers of br_release_then_route_key, br_release_then_route,
 * br_release_then_route_request and br_route_keys): the branch code in the low
 * BR_DECISION_BRANCH_BITS bits, the chosen worker's id from bit BR_DECISION_WORKER_SHIFT and the
 * preferred worker's id from bit BR_DECISION_PREFERRED_SHIFT, each below BR_DECISION_ID_LIMIT.
 * Both ids are 0 when no worker was chosen, so such a decision is below 64. Ids that do not fit
 * (a router 2^28 workers have joined) are left out and BR_DECISION_IDS_DONT_FIT is set; the
 * call's other output has them. */
#define BR_DECISION_BRANCH_BITS 6
#define BR_DECISION_WORKER_SHIFT 6
#define BR_DECISION_PREFERRED_SHIFT 34
#define BR_DECISION_ID_LIMIT (1 << 28)
#define BR_DECISION_IDS_DONT_FIT ((int64_t)1 << 62)
#define BR_DECISION_BRANCH(d) ((int32_t)((d) & 0x3F))
#define BR_DECISION_WORKER_ID(d) ((uint32_t)(((d) >> BR_DECISION_WORKER_SHIFT) & 0xFFFFFFF))
#define BR_DECISION_PREFERRED_ID(d) ((uint32_t)(((d) >> BR_DECISION_PREFERRED_SHIFT) & 0xFFFFFFF))

/* The longest string or block any function accepts, in bytes. */
#define BR_MAX_ARG_LEN 2147483647
/* The largest weight of one lease (docs/contract.md, "Weighted leases"). */
#define BR_MAX_LEASE_WEIGHT (1 << 30)
/* The most prefix blocks one request may carry. */
#define BR_MAX_PREFIX_BLOCKS (1 << 16)

/* Every routing input of one request, for br_route_request and br_route_requests. */
typedef struct br_request {
    const char *key;                /* explicit routing key, overrides X-SMG-Routing-Key; may be NULL with key_len 0 */
    size_t key_len;
    const char *headers;            /* header block, as br_route takes it; may be NULL with headers_len 0 */
    size_t headers_len;
    int64_t weight;                 /* what the lease counts on its worker's load: 0 means 1, else 1..BR_MAX_LEASE_WEIGHT */
    const uint64_t *prefix_blocks;  /* the prompt's prefix block hashes, in order (read during the call only) */
    size_t prefix_blocks_len;       /* at most BR_MAX_PREFIX_BLOCKS */
} br_request;

#ifndef BR_NO_PROTOTYPES
#ifdef __cplusplus
extern "C" {
#endif

/* The text of the calling thread's last error, NUL-terminated; valid until its next failing call. */
const char *br_last_error(void);

/* BR_ABI_VERSION of the library. */
uint32_t br_abi_version(void);

/* The library's constants as JSON: {"abi_version", "status": {name: code}, "branches": [name
 * by code], "decision": {...}, "limits": {...}, "defaults": {...}, "policies": [...],
 * "assignment_modes": [...], ...}; "limits" holds BR_MAX_ARG_LEN, BR_MAX_LEASE_WEIGHT and
 * BR_MAX_PREFIX_BLOCKS among others. Like every
 * *_json function it returns the length of the whole text and writes it to buf only when it fits
 * in capacity bytes (call again with a larger buffer otherwise), or a negative status. */
int64_t br_constants_json(char *buf, size_t capacity);

/* Builds a router from a JSON configuration, e.g. {"worker_urls": ["http://w0:8000"],
 * "virtual_nodes": 150, "policy": {"type": "bounded_consistent_hashing", "max_load_skew": 1.5,
 * "min_load_gap": 2}}, and stores its handle in *out_router. Other policies: "random" (setting
 * "seed"), "round_robin", "consistent_hashing", "power_of_two", "least_load", "manual" (settings
 * "assignment_mode", "max_keys"), "cache_aware" (settings "max_load_skew", "min_load_gap",
 * "blocks_per_worker", "cache_threshold", "hash_ring", "balance_by" and "hit_wait_factor";
 * docs/contract.md, "cache_aware", "Prefill load"); SMG's "bucket",
 * "prefix_hash", "passthrough" are refused as not implemented. "routing_key_headers": [...] names
 * the headers of the routing key (docs/contract.md, "Inputs and precedence"). */
int32_t br_router_new(const char *config_json, size_t config_len, uint64_t *out_router);
/* Closes a router; its handle becomes invalid (closing twice is BR_ERR_INVALID_HANDLE). Its
 * feeds (br_load_poll_start, br_kv_events_start, br_peer_routes_start) are stopped first, and
 * their handles become invalid too. Routers, feeds and gateways draw their handles from one
 * sequence, so a handle of one kind never names one of another. */
int32_t br_router_free(uint64_t router);

/* Membership and health. br_set_workers takes a JSON array of URLs. */
int32_t br_add_worker(uint64_t router, const char *url, size_t url_len);
int32_t br_remove_worker(uint64_t router, const char *url, size_t url_len);
int32_t br_set_workers(uint64_t router, const char *urls_json, size_t urls_len);
int32_t br_set_healthy(uint64_t router, const char *url, size_t url_len, int32_t healthy);
/* Forgets the remembered worker of every routing key (key_memory of bounded_consistent_hashing,
 * the keys of manual; docs/contract.md, "Key memory"); leases and loads are untouched. Returns
 * how many keys were remembered (0 without a memory). */
int32_t br_forget_keys(uint64_t router);
/* Engine load reports (docs/contract.md, "Engine load reports"): br_report_load records what a
 * worker's engine reports, each figure 0 to 2^40 or -1 when the report does not carry it: load,
 * its requests running and waiting; waiting, its prefill queue in the unit of the lease weights;
 * waiting_requests, its requests waiting (used without waiting, times the mean lease weight).
 * The worker's routing load (prefill load) is then load (waiting) plus the weights of the leases
 * taken since (and not past their first token). br_forget_load drops the standing report
 * (expired): the routing loads are this router's leases again. */
int32_t br_report_load(uint64_t router, const char *url, size_t url_len, int64_t load, int64_t waiting,
                       int64_t waiting_requests);
int32_t br_forget_load(uint64_t router, const char *url, size_t url_len);
/* Peer routes (docs/contract.md, "Peer routes"): another router replica sent a request of weight
 * (1 to 2^30; 0 means 1) and n prefix blocks (NULL when n is 0) to the worker. While an engine
 * report stands for the worker the weight adds to its routing loads until the next report; the
 * blocks join its cache_aware index as this router's own routes do. */
int32_t br_peer_route(uint64_t router, const char *url, size_t url_len, int64_t weight, const uint64_t *blocks, size_t n);
/* Feeds: the engines' own state brought into a router on the library's threads, off unless
 * started; each start stores a feed handle in *out_feed. br_load_poll_start polls the workers'
 * load endpoints and reports the loads; options_json: {"endpoints": {worker URL: endpoint URL},
 * "format": "sglang" (GET /get_load), "sglang_loads" (GET /v1/loads) or "vllm" (GET /metrics),
 * "lease_weights": "requests" or "tokens" (the unit of the router's leases: with tokens the waiting
 * tokens are reported, not the requests), "interval_ms": 200,
 * "timeout_ms": interval, "expiry_ms": 3 intervals} (0 or absent: the default); its counters
 * {"workers": [{"worker", "reports", "failures": {"unreachable", "status", "garbage"},
 * "expired", "standing"}]}. br_kv_events_start (cache_aware only) subscribes to the workers' KV
 * event streams (docs/contract.md, "Reported blocks"); options_json: {"endpoints": {worker URL:
 * "tcp://host:port"}, "replay_endpoints": {worker URL: "tcp://host:port"}, "topic": "",
 * "stale_after_ms": 10000}; its counters {"workers": [{"worker", "batches", "stored", "removed",
 * "cleared", "unknown_parent", "adapter", "unknown_tag", "gaps", "replayed", "lost",
 * "malformed", "restarts", "stale"}]}. Every worker named must be a member.
 * br_peer_routes_start shares routes with other router replicas (docs/contract.md, "Sharing
 * routes over the wire"): it publishes each lease this router takes and applies the peers' as
 * br_peer_route does; options_json: {"publish": "tcp://host:port" (bound; port 0 picks one),
 * "peers": ["tcp://host:port", ...], "topic": ""}, one of publish and peers at least, one
 * publishing feed per router; its counters {"publish" (the endpoint bound), "published",
 * "dropped", "peers": [{"peer", "batches", "routes", "own", "unknown_worker", "invalid",
 * "malformed", "gaps"}]}. br_feed_stats_json writes a feed's counters; br_feed_stop ends it and
 * waits (a load poll forgets the reports that stand). */
int32_t br_load_poll_start(uint64_t router, const char *options_json, size_t options_len, uint64_t *out_feed);
int32_t br_kv_events_start(uint64_t router, const char *options_json, size_t options_len, uint64_t *out_feed);
int32_t br_peer_routes_start(uint64_t router, const char *options_json, size_t options_len, uint64_t *out_feed);
int64_t br_feed_stats_json(uint64_t feed, char *buf, size_t capacity);
int32_t br_feed_stop(uint64_t feed);

/* Routes a request whose only input is an explicit key (empty: no key) and takes a lease on the
 * chosen worker. Returns the branch code; out[0] receives the lease (0 when no worker was
 * chosen), out[1] the chosen worker's id in its low 32 bits and the preferred one's above. */
int32_t br_route_key(uint64_t router, const char *key, size_t key_len, uint64_t *out);
/* Routes from a header block (for each header: a little-endian uint32 name length, the name, a
 * uint32 value length, the value) and an explicit key that, when non-empty, overrides the
 * router's routing-key headers (X-SMG-Routing-Key unless configured). take_lease 0 only selects
 * (out[0] is 0). Answers as br_route_key. */
int32_t br_route(uint64_t router, const char *key, size_t key_len, const char *headers, size_t headers_len,
                 int32_t take_lease, uint64_t *out);
/* Release the lease in io[2] (nothing when 0 or not active), then route like br_route_key /
 * br_route with a lease, in one step. io[2] is cleared, io[0] and io[1] answer as out[0] and
 * out[1] above, and the packed decision (BR_DECISION_*) is returned, or a negative status. */
int64_t br_release_then_route_key(uint64_t router, const char *key, size_t key_len, uint64_t *io);
int64_t br_release_then_route(uint64_t router, const char *key, size_t key_len, const char *headers,
                              size_t headers_len, uint64_t *io);
/* Routes n explicit keys in order as one step: keys back to back (keys_len bytes), lengths[i]
 * the length of key i. out receives three runs of n values: leases, packed decisions, worker
 * ids (as out[1] above). All or nothing: either every key gets a lease or none does. */
int32_t br_route_keys(uint64_t router, const char *keys, size_t keys_len, const uint32_t *lengths, uint32_t n,
                      uint64_t *out);
/* br_route_keys with a lease of weights[i] (1..BR_MAX_LEASE_WEIGHT) for key i. A weight out of
 * range routes no key: BR_ERR_INVALID_ARGUMENT, and the text names its index. */
int32_t br_route_weighted_keys(uint64_t router, const char *keys, size_t keys_len, const uint32_t *lengths,
                               const int64_t *weights, uint32_t n, uint64_t *out);

/* Routes (take_lease 1) or only selects (0) one request from every routing input it carries,
 * answering as br_route does; a lease counts the request's weight. A weight outside 0..
 * BR_MAX_LEASE_WEIGHT or more than BR_MAX_PREFIX_BLOCKS prefix blocks is
 * BR_ERR_INVALID_ARGUMENT, and the text names the field. */
int32_t br_route_request(uint64_t router, const br_request *request, int32_t take_lease, uint64_t *out);
/* Release the lease in io[2], then route like br_route_request with a lease, in one step, with
 * the request's inputs as arguments (weight 0 means 1; prefix_blocks may be NULL with
 * prefix_blocks_len 0): answers as br_release_then_route. The release happens even when an
 * argument is rejected. */
int64_t br_release_then_route_request(uint64_t router, const char *key, size_t key_len, const char *headers,
                                      size_t headers_len, int32_t weight, const uint64_t *prefix_blocks,
                                      size_t prefix_blocks_len, uint64_t *io);
/* Routes n requests in order as one step, answering as br_route_keys does (out: 3n values), all
 * or nothing. An invalid request routes none, and the text names its index. */
int32_t br_route_requests(uint64_t router, const br_request *requests, uint32_t n, uint64_t *out);

/* Counts a request on a member chosen elsewhere under a lease of weight (0 means 1, else
 * 1..BR_MAX_LEASE_WEIGHT): out[0] the lease, out[1] the worker's id. */
int32_t br_acquire(uint64_t router, const char *url, size_t url_len, const char *key, size_t key_len,
                   int64_t weight, uint64_t *out);
/* Release a lease: 1 if released, 0 if already released or unknown. br_release_abandoned also
 * counts it as leaked (for safety nets such as finalizers). */
int32_t br_release(uint64_t router, uint64_t lease);
int32_t br_release_abandoned(uint64_t router, uint64_t lease);
/* Releases n leases in one step; returns how many it released. */
int32_t br_release_many(uint64_t router, const uint64_t *leases, uint32_t n);
/* Release a lease and record how its request ended (BR_OUTCOME_*): failures eject a worker
 * after the circuit breaker's threshold; br_release is br_finish with BR_OUTCOME_SUCCESS.
 * Returns 1 if released, 0 if already released or unknown. */
int32_t br_finish(uint64_t router, uint64_t lease, int32_t outcome);
/* Marks a lease as having seen its first token: its weight leaves its worker's prefill load
 * (docs/contract.md, "Prefill load"). Idempotent. Returns 1 if it marked the lease, 0 if the
 * lease was marked before or is not active. */
int32_t br_first_token(uint64_t router, uint64_t lease);
/* Routes a retry of request (as br_route_request does with a lease: its key, headers, weight and
 * prefix blocks) never to the workers whose URLs the JSON array avoid_json lists (non-members are
 * ignored): a keyed request goes to the next available worker clockwise from its key
 * (BR_BRANCH_FAILOVER), any other where the policy sends it among the rest. */
int32_t br_route_avoiding(uint64_t router, const br_request *request, const char *avoid_json, size_t avoid_len, uint64_t *out);

/* JSON reports, answered as br_constants_json. br_lease_workers_json: {"worker_url",
 * "preferred_url"} of an active lease. br_workers_json: [{"url", "id", "healthy", "load",
 * "requests", "prefill_load", "prefill_requests", "active_keys", "indexed_blocks", "condition", "consecutive_failures", "ejections",
 * "routed", "outcomes", "probes"}] in membership order ("load" the weights of the
 * worker's leases, "requests" their number). br_stats_json: {"branches": {name: count},
 * "leaked", "active_leases", "prefix_blocks", "prefix_blocks_matched", "indexed_blocks",
 * "policy", "workers"}, all read in one snapshot. br_members_json: [[id, "url"], ...], the
 * members' ids and URLs alone in membership order, which costs a small part of
 * br_workers_json (for a binding that names the workers of its routes by id). */
int64_t br_lease_workers_json(uint64_t router, uint64_t lease, char *buf, size_t capacity);
int64_t br_workers_json(uint64_t router, char *buf, size_t capacity);
int64_t br_members_json(uint64_t router, char *buf, size_t capacity);
int64_t br_stats_json(uint64_t router, char *buf, size_t capacity);

/* Prefix block hashes for the cache_aware policy: the chained XXH64 of each full block of
 * block_len bytes of data (block 0 hashes its bytes, block i > 0 the previous hash as 8
 * little-endian bytes followed by its bytes; a partial last block is left out). Token ids go in
 * as little-endian uint32s (block_len = 4 * tokens per block), text as UTF-8. Writes the hashes
 * to out (room for out_capacity) and returns how many, or a negative status when block_len is
 * 0, out is too small or the blocks exceed BR_MAX_PREFIX_BLOCKS. */
int64_t br_prefix_blocks(const char *data, size_t data_len, size_t block_len, uint64_t *out, size_t out_capacity);

/* Blocks a worker's engine reports (cache_aware only; docs/contract.md, "Reported blocks"), so
 * that the index holds what the engine really caches. br_store_blocks: the engine stores the n
 * blocks (prefix block hashes as br_prefix_blocks computes them, in prefix order);
 * engine_hashes, NULL or n values, are the engine's own names for them (NULL: the engine names
 * them as this library does). br_remove_blocks: the engine evicted the n blocks it names
 * engine_hashes. br_clear_blocks: the engine dropped every block. At most BR_MAX_PREFIX_BLOCKS
 * blocks per call; another policy is BR_ERR_INVALID_ARGUMENT, a URL that is not a member
 * BR_ERR_UNKNOWN_WORKER. */
int32_t br_store_blocks(uint64_t router, const char *url, size_t url_len, const uint64_t *blocks, size_t n, const uint64_t *engine_hashes);
int32_t br_remove_blocks(uint64_t router, const char *url, size_t url_len, const uint64_t *engine_hashes, size_t n);
int32_t br_clear_blocks(uint64_t router, const char *url, size_t url_len);

/* The native HTTP gateway in front of a router's workers, run on the library's own threads.
 * br_gateway_start takes options as a JSON object ({"host", "port", "metrics_port",
 * "max_body_size", "first_byte_timeout", ...}; empty for the defaults) and stores the gateway's
 * handle in *out_gateway. br_gateway_address_json: {"address", "metrics_address", "in_flight"},
 * answered as br_constants_json. br_gateway_stop drains in-flight requests for up to timeout_ms
 * (the shutdown_timeout option when 0 or less), cuts the rest and returns 0, or 1 if some were
 * cut; the handle becomes invalid. */
int32_t br_gateway_start(uint64_t router, const char *options_json, size_t options_len, uint64_t *out_gateway);
int64_t br_gateway_address_json(uint64_t gateway, char *buf, size_t capacity);
int32_t br_gateway_stop(uint64_t gateway, int64_t timeout_ms);

#ifdef __cplusplus
}
#endif
#endif /* BR_NO_PROTOTYPES */
#endif /* BOUNDED_ROUTER_H */
