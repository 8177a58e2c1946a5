// Proves the C API is usable without Python: builds a bounded router over four workers, routes
// a few keys, checks affinity, spill, release, error handling, JSON output and SMG's hash ring,
// and exits 0 only when every check holds.
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bounded_router.h"

static int failures = 0;

#define CHECK(cond, ...)                                                     \
	do {                                                                     \
		if (!(cond)) {                                                       \
			fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);             \
			fprintf(stderr, __VA_ARGS__);                                    \
			fprintf(stderr, " (last error: %s)\n", br_last_error());         \
			failures++;                                                      \
		}                                                                    \
	} while (0)

static int32_t route(uint64_t router, const char *key, uint64_t out[2]) {
	return br_route_key(router, key, strlen(key), out);
}

static uint32_t chosen(const uint64_t out[2]) { return (uint32_t)out[1]; }
static uint32_t preferred(const uint64_t out[2]) { return (uint32_t)(out[1] >> 32); }

// A number of a worker read from br_workers_json: the field (e.g. "\"load\":") after its "url".
static long long field_of(uint64_t router, const char *url, const char *field) {
	char json[4096];
	int64_t n = br_workers_json(router, json, sizeof json - 1);
	if (n <= 0 || n >= (int64_t)sizeof json) {
		return -1;
	}
	json[n] = '\0';
	const char *at = strstr(json, url);
	const char *value = at ? strstr(at, field) : NULL;
	return value ? atoll(value + strlen(field)) : -1;
}

// The weight a worker carries.
static long long load_of(uint64_t router, const char *url) { return field_of(router, url, "\"load\":"); }

static const char *url_of(uint64_t router, uint64_t lease) {
	static char json[512];
	int64_t n = br_lease_workers_json(router, lease, json, sizeof json - 1);
	if (n <= 0 || n >= (int64_t)sizeof json) {
		return "";
	}
	json[n] = '\0';
	char *url = strstr(json, "\"worker_url\":\"");
	if (!url) {
		return "";
	}
	url += 14;
	*strchr(url, '"') = '\0';
	return url;
}

// br_route_request, br_route_requests and br_acquire with weights and prefix blocks: a lease
// counts its weight, bad weights and too many blocks are refused naming the field, a batch is
// all or nothing.
static void check_weighted_requests(void) {
	const char *config =
		"{\"worker_urls\": [\"http://w0:8000\", \"http://w1:8000\", \"http://w2:8000\"],"
		" \"policy\": {\"type\": \"bounded_consistent_hashing\", \"min_load_gap\": 1000000000000}}";
	uint64_t router = 0, out[2], plain[2];
	CHECK(br_router_new(config, strlen(config), &router) == BR_OK, "router_new");
	uint64_t blocks[3] = {0xdeadbeef, 0xfeedface, UINT64_MAX};
	br_request req = {"session-7", 9, NULL, 0, 300, blocks, 3};
	CHECK(br_route_request(router, &req, 1, out) == BR_BRANCH_EXPLICIT_ROUTING_KEY_HIT, "weighted route");
	CHECK(route(router, "session-7", plain) == BR_BRANCH_EXPLICIT_ROUTING_KEY_HIT && chosen(plain) == chosen(out),
		  "same worker as br_route_key");
	const char *url = url_of(router, out[0]);
	CHECK(load_of(router, url) == 301, "weight 300 plus weight 1 on %s: %lld", url, load_of(router, url));
	// Headers in the struct: the header's key is overridden by the struct's key, as in br_route.
	br_request with_headers = {"session-7", 9, "\x11\x00\x00\x00X-SMG-Routing-Key\x01\x00\x00\x00z", 26, 0, NULL, 0};
	uint64_t selected[2];
	CHECK(br_route_request(router, &with_headers, 0, selected) == BR_BRANCH_EXPLICIT_ROUTING_KEY_HIT && selected[0] == 0 &&
			  chosen(selected) == chosen(out),
		  "select from key and headers");

	req.weight = -2;
	CHECK(br_route_request(router, &req, 1, out) == BR_ERR_INVALID_ARGUMENT, "negative weight");
	CHECK(strstr(br_last_error(), "weight must be an integer from 1 to 1073741824, got -2") != NULL, "names weight: %s", br_last_error());
	req.weight = (int64_t)BR_MAX_LEASE_WEIGHT + 1;
	CHECK(br_route_request(router, &req, 1, out) == BR_ERR_INVALID_ARGUMENT, "weight too large");
	req.weight = 1;
	req.prefix_blocks_len = BR_MAX_PREFIX_BLOCKS + 1;
	CHECK(br_route_request(router, &req, 1, out) == BR_ERR_INVALID_ARGUMENT, "too many prefix blocks");
	CHECK(strstr(br_last_error(), "prefix_blocks") != NULL, "names prefix_blocks: %s", br_last_error());
	req.prefix_blocks = NULL;
	req.prefix_blocks_len = 2;
	CHECK(br_route_request(router, &req, 1, out) == BR_ERR_INVALID_ARGUMENT, "NULL prefix blocks");
	CHECK(load_of(router, url) == 301, "refused requests count nothing");

	// br_release_then_route_request: the struct's inputs as arguments, and the release of io[2]
	// first, which stands even when an argument is rejected.
	uint64_t io[3] = {0, 0, out[0]};
	int64_t decision = br_release_then_route_request(router, "session-7", 9, NULL, 0, 40, blocks, 3, io);
	CHECK(BR_DECISION_BRANCH(decision) == BR_BRANCH_EXPLICIT_ROUTING_KEY_HIT && io[0] != 0 && io[2] == 0, "weighted route with release");
	CHECK(BR_DECISION_WORKER_ID(decision) == chosen(io) && chosen(io) == chosen(plain), "packed: the key's worker");
	CHECK(load_of(router, url) == 41, "weight 300 released, weight 40 taken: %lld", load_of(router, url));
	io[2] = io[0];
	CHECK(br_release_then_route_request(router, "session-7", 9, NULL, 0, -3, NULL, 0, io) == BR_ERR_INVALID_ARGUMENT, "bad weight");
	CHECK(strstr(br_last_error(), "weight") != NULL, "names weight: %s", br_last_error());
	CHECK(br_release_then_route_request(router, "k", 1, NULL, 0, 0, NULL, 1, io) == BR_ERR_INVALID_ARGUMENT, "NULL blocks");
	CHECK(io[2] == 0 && load_of(router, url) == 1, "released although refused: %lld", load_of(router, url));

	// A batch: every request gets a lease, or none does and the error names the bad one.
	br_request batch[3] = {{"a", 1, NULL, 0, 5, NULL, 0}, {"b", 1, NULL, 0, 0, blocks, 2}, {"a", 1, NULL, 0, 7, NULL, 0}};
	uint64_t leases[9];
	CHECK(br_route_requests(router, batch, 3, leases) == BR_OK, "batch");
	CHECK(leases[0] && leases[1] && leases[2], "every request has a lease");
	CHECK(BR_DECISION_WORKER_ID(leases[3]) == BR_DECISION_WORKER_ID(leases[5]), "key a twice: one worker");
	CHECK(br_release_many(router, leases, 3) == 3, "release the batch");
	batch[2].weight = -1;
	memset(leases, 0, sizeof leases);
	CHECK(br_route_requests(router, batch, 3, leases) == BR_ERR_INVALID_ARGUMENT, "batch with a bad weight");
	CHECK(strstr(br_last_error(), "(request 2)") != NULL, "names the request: %s", br_last_error());
	CHECK(leases[0] == 0 && leases[1] == 0, "all or nothing");

	// br_route_weighted_keys: the keys' batch with a weight each; a bad weight routes none.
	int64_t weights[2] = {6, 9};
	uint32_t lengths[2] = {1, 1};
	memset(leases, 0, sizeof leases);
	CHECK(br_route_weighted_keys(router, "ab", 2, lengths, weights, 2, leases) == BR_OK && leases[0] && leases[1], "weighted keys");
	long long total = load_of(router, "http://w0:8000") + load_of(router, "http://w1:8000") + load_of(router, "http://w2:8000");
	CHECK(total == 1 + 6 + 9, "the plain lease and the weights: %lld", total);
	CHECK(br_release_many(router, leases, 2) == 2, "release the weighted keys");
	weights[1] = 0;
	memset(leases, 0, sizeof leases);
	CHECK(br_route_weighted_keys(router, "ab", 2, lengths, weights, 2, leases) == BR_ERR_INVALID_ARGUMENT, "weight 0");
	CHECK(strstr(br_last_error(), "(request 1)") != NULL && leases[0] == 0, "names the key, routes none: %s", br_last_error());
	CHECK(br_route_weighted_keys(router, "ab", 2, lengths, NULL, 2, leases) == BR_ERR_INVALID_ARGUMENT, "NULL weights");

	// br_acquire counts its weight; 0 means 1.
	uint64_t acquired[2];
	CHECK(br_acquire(router, "http://w2:8000", 14, NULL, 0, 1000, acquired) == BR_OK, "acquire with weight");
	CHECK(br_acquire(router, "http://w2:8000", 14, NULL, 0, 0, acquired) == BR_OK, "acquire with weight 0");
	CHECK(br_acquire(router, "http://w2:8000", 14, NULL, 0, -1, acquired) == BR_ERR_INVALID_ARGUMENT, "acquire with a bad weight");
	long long before = strcmp(url, "http://w2:8000") == 0 ? 301 : 0;
	CHECK(load_of(router, "http://w2:8000") == before + 1001, "acquired weights: %lld", load_of(router, "http://w2:8000"));
	CHECK(br_router_free(router) == BR_OK, "free");
}

// docs/contract.md, "Worker failures": outcomes eject a worker, a retry avoids the tried ones.
static void check_worker_failures(void) {
	const char *config = "{\"worker_urls\": [\"http://127.0.0.1:9\", \"http://127.0.0.1:10\"],"
			     " \"circuit_breaker\": {\"failure_threshold\": 2}}";
	uint64_t router = 0, out[2], retry[2];
	CHECK(br_router_new(config, strlen(config), &router) == BR_OK, "router_new with a circuit breaker");
	CHECK(route(router, "s", out) == BR_BRANCH_EXPLICIT_ROUTING_KEY_HIT, "route");
	CHECK(br_finish(router, out[0], 7) == BR_ERR_INVALID_ARGUMENT, "an unknown outcome");
	CHECK(strstr(br_last_error(), "outcome must be a BR_OUTCOME_* code") != NULL, "names the outcome: %s", br_last_error());
	const char *tried = chosen(out) == 1 ? "[\"http://127.0.0.1:9\"]" : "[\"http://127.0.0.1:10\"]";
	br_request again = {"s", 1, NULL, 0, 0, NULL, 0};
	CHECK(br_route_avoiding(router, &again, tried, strlen(tried), retry) == BR_BRANCH_FAILOVER, "failover");
	CHECK(chosen(retry) != chosen(out), "the retry avoids the tried worker");
	CHECK(br_finish(router, out[0], BR_OUTCOME_FAILURE) == 1 && br_finish(router, out[0], BR_OUTCOME_FAILURE) == 0, "finish once");
	CHECK(br_finish(router, retry[0], BR_OUTCOME_SUCCESS) == 1, "finish the retry");
	CHECK(br_route_avoiding(router, &again, "{", 1, retry) == BR_ERR_INVALID_ARGUMENT, "bad avoid_json");
	CHECK(strstr(br_last_error(), "avoid_json") != NULL, "names avoid_json: %s", br_last_error());
	CHECK(br_router_free(router) == BR_OK, "free");
}

// docs/contract.md, "Prefill load": br_first_token takes a lease's weight off its worker's
// prefill load, once.
static void check_first_token(void) {
	const char *config = "{\"worker_urls\": [\"http://127.0.0.1:9\"], \"policy\": {\"type\": \"cache_aware\", \"balance_by\": \"prefill\"}}";
	uint64_t router = 0, lease[2];
	CHECK(br_router_new(config, strlen(config), &router) == BR_OK, "router_new with balance_by");
	CHECK(br_acquire(router, "http://127.0.0.1:9", 18, NULL, 0, 40, lease) == BR_OK, "acquire");
	CHECK(field_of(router, "http://127.0.0.1:9", "\"prefill_load\":") == 40, "prefill load before the first token");
	CHECK(br_first_token(router, lease[0]) == 1 && br_first_token(router, lease[0]) == 0, "first token once");
	CHECK(field_of(router, "http://127.0.0.1:9", "\"prefill_load\":") == 0, "prefill load after it");
	CHECK(load_of(router, "http://127.0.0.1:9") == 40, "the load keeps the lease");
	CHECK(br_release(router, lease[0]) == 1 && br_first_token(router, lease[0]) == 0, "a released lease");
	CHECK(br_first_token(0, lease[0]) == BR_ERR_INVALID_HANDLE, "a bad handle");
	CHECK(br_router_free(router) == BR_OK, "free");
}

// docs/contract.md, "Engine load reports": while a report stands a worker's routing load is the
// report plus the leases taken since; -1 leaves a figure unreported, below -1 is refused.
static void check_report_load(void) {
	const char *config = "{\"worker_urls\": [\"http://127.0.0.1:9\", \"http://127.0.0.1:10\"], \"policy\": {\"type\": \"least_load\"}}";
	uint64_t router = 0, out[2];
	CHECK(br_router_new(config, strlen(config), &router) == BR_OK, "router_new for load reports");
	CHECK(br_report_load(router, "http://127.0.0.1:9", 18, 5, -1, -1) == BR_OK, "report_load");
	CHECK(route(router, "k", out) >= 0 && chosen(out) == 2, "the reported 5 on :9 (id 1): :10 (id 2) is least loaded");
	CHECK(br_report_load(router, "http://127.0.0.1:10", 19, 9, 0, -1) == BR_OK, "report_load with waiting");
	CHECK(br_release(router, out[0]) == 1, "release");
	CHECK(route(router, "k", out) >= 0 && chosen(out) == 1, "5 against 9: :9");
	CHECK(br_release(router, out[0]) == 1, "release");
	CHECK(br_report_load(router, "http://127.0.0.1:9", 18, -2, -1, -1) == BR_ERR_INVALID_ARGUMENT, "a load below -1");
	CHECK(br_report_load(router, "http://127.0.0.1:11", 19, 1, -1, -1) == BR_ERR_UNKNOWN_WORKER, "not a member");
	CHECK(br_forget_load(router, "http://127.0.0.1:9", 18) == BR_OK, "forget_load");
	CHECK(route(router, "k", out) >= 0 && chosen(out) == 1, "0 against 9: :9");
	CHECK(br_release(router, out[0]) == 1, "release");
	CHECK(br_router_free(router) == BR_OK, "free");
}

// docs/contract.md, "Peer routes": a peer's route adds to a standing report until the next one.
static void check_peer_route(void) {
	const char *config = "{\"worker_urls\": [\"http://127.0.0.1:9\", \"http://127.0.0.1:10\"], \"policy\": {\"type\": \"least_load\"}}";
	uint64_t router = 0, out[2];
	CHECK(br_router_new(config, strlen(config), &router) == BR_OK, "router_new for peer routes");
	CHECK(br_report_load(router, "http://127.0.0.1:9", 18, 0, -1, -1) == BR_OK, "report 0 on :9");
	CHECK(br_report_load(router, "http://127.0.0.1:10", 19, 1, -1, -1) == BR_OK, "report 1 on :10");
	CHECK(br_peer_route(router, "http://127.0.0.1:9", 18, 2, NULL, 0) == BR_OK, "peer_route");
	CHECK(route(router, "k", out) >= 0 && chosen(out) == 2, "0 + 2 from a peer on :9 against 1: :10");
	CHECK(br_release(router, out[0]) == 1, "release");
	CHECK(br_peer_route(router, "http://127.0.0.1:9", 18, -1, NULL, 0) == BR_ERR_INVALID_ARGUMENT, "a weight below 0");
	CHECK(br_peer_route(router, "http://127.0.0.1:11", 19, 1, NULL, 0) == BR_ERR_UNKNOWN_WORKER, "not a member");
	CHECK(br_router_free(router) == BR_OK, "free");
}

// docs/contract.md, "Sharing routes over the wire": a feed that publishes on a port the system
// picks, refused twice on one router and for a bad endpoint; its counters; stopped once.
static void check_peer_routes_feed(void) {
	const char *config = "{\"worker_urls\": [\"http://127.0.0.1:9\"], \"policy\": {\"type\": \"least_load\"}}";
	const char *options = "{\"publish\": \"tcp://127.0.0.1:0\"}";
	const char *bad = "{\"peers\": [\"udp://127.0.0.1:5\"]}";
	uint64_t router = 0, feed = 0, second = 0, out[2];
	char json[512];
	CHECK(br_router_new(config, strlen(config), &router) == BR_OK, "router_new for the peer routes feed");
	CHECK(br_peer_routes_start(router, options, strlen(options), &feed) == BR_OK && feed != 0, "peer_routes_start");
	CHECK(br_peer_routes_start(router, options, strlen(options), &second) == BR_ERR_INVALID_ARGUMENT, "a second publisher");
	CHECK(strstr(br_last_error(), "publishes its routes already") != NULL, "the error says why");
	CHECK(br_peer_routes_start(router, bad, strlen(bad), &second) == BR_ERR_INVALID_ARGUMENT, "a udp:// peer");
	CHECK(strstr(br_last_error(), "peers must be tcp://host:port") != NULL, "the error names the field");
	CHECK(route(router, "k", out) >= 0, "a route to publish");
	int64_t n = br_feed_stats_json(feed, json, sizeof json - 1);
	CHECK(n > 0 && n < (int64_t)sizeof json, "feed_stats_json: %lld", (long long)n);
	json[n > 0 && n < (int64_t)sizeof json ? n : 0] = '\0';
	CHECK(strstr(json, "\"publish\":\"tcp://127.0.0.1:") != NULL && strstr(json, "\"peers\":[]") != NULL, "stats %s", json);
	CHECK(br_feed_stop(feed) == BR_OK, "feed_stop");
	CHECK(br_feed_stop(feed) == BR_ERR_INVALID_ARGUMENT, "stopped once: the handle is gone");
	CHECK(br_release(router, out[0]) == 1, "release");
	CHECK(br_router_free(router) == BR_OK, "free");
}

int main(void) {
	CHECK(br_abi_version() == BR_ABI_VERSION, "abi version %u", br_abi_version());
	char constants[4096];
	int64_t constants_len = br_constants_json(constants, sizeof constants - 1);
	CHECK(constants_len > 0 && constants_len < (int64_t)sizeof constants, "constants_json: %lld", (long long)constants_len);
	constants[constants_len > 0 && constants_len < (int64_t)sizeof constants ? constants_len : 0] = '\0';
	CHECK(strstr(constants, "\"explicit_routing_key_spillover\"") != NULL, "constants name the branches");

	const char *config =
		"{\"worker_urls\": [\"http://w0:8000\", \"http://w1:8000\", \"http://w2:8000\", \"http://w3:8000\"],"
		" \"policy\": {\"type\": \"bounded_consistent_hashing\", \"max_load_skew\": 1.5, \"min_load_gap\": 2}}";
	uint64_t router = 0;
	CHECK(br_router_new(config, strlen(config), &router) == BR_OK, "router_new");

	// Affinity: the same key goes to the same worker while the loads stay balanced.
	uint64_t first[2], again[2];
	CHECK(route(router, "session-42", first) == BR_BRANCH_EXPLICIT_ROUTING_KEY_HIT, "first route");
	CHECK(br_release(router, first[0]) == 1, "release");
	CHECK(br_release(router, first[0]) == 0, "second release is a no-op");
	CHECK(route(router, "session-42", again) == BR_BRANCH_EXPLICIT_ROUTING_KEY_HIT, "again");
	CHECK(chosen(again) == chosen(first), "affinity: %u then %u", chosen(first), chosen(again));
	CHECK(br_release(router, again[0]) == 1, "release again");
	CHECK(br_release(router, again[0]) == 0, "released once only");

	// Spill: holding leases of one key piles load on its worker; with gap 2 the fourth
	// concurrent request (preferred load 3, min 0, mean 0.75) spills elsewhere.
	uint64_t held[4][2];
	for (int i = 0; i < 3; i++) {
		CHECK(route(router, "burst", held[i]) == BR_BRANCH_EXPLICIT_ROUTING_KEY_HIT, "burst %d", i);
	}
	CHECK(route(router, "burst", held[3]) == BR_BRANCH_EXPLICIT_ROUTING_KEY_SPILLOVER, "fourth spills");
	CHECK(chosen(held[3]) != preferred(held[3]), "spilled request left its preferred worker");
	CHECK(preferred(held[3]) == chosen(held[0]), "preferred is where the key lives");
	// Releasing in the same step as the next route: freeing one of the preferred worker's
	// three leases brings it to load 2, so the key stays home instead of spilling.
	CHECK(br_release(router, held[3][0]) == 1, "release the spilled request");
	uint64_t io[3] = {0, 0, held[2][0]};
	int64_t decision = br_release_then_route_key(router, "burst", 5, io);
	CHECK(BR_DECISION_BRANCH(decision) == BR_BRANCH_EXPLICIT_ROUTING_KEY_HIT, "release then route: %lld", (long long)decision);
	CHECK(io[2] == 0, "the released lease is consumed");
	CHECK(chosen(io) == chosen(held[0]), "home again");
	CHECK(BR_DECISION_WORKER_ID(decision) == chosen(io) && BR_DECISION_PREFERRED_ID(decision) == preferred(io), "packed ids");
	CHECK(!(decision & BR_DECISION_IDS_DONT_FIT), "four workers' ids fit");
	CHECK(br_release(router, held[2][0]) == 0, "held[2] was released by the combined step");
	held[2][0] = io[0];
	held[3][0] = 0;
	// The same with a header block: the release stands even when the block is rejected.
	uint64_t extra[2];
	CHECK(route(router, "session-42", extra) >= 0 && extra[0] != 0, "one more lease");
	io[2] = extra[0];
	CHECK(br_release_then_route(router, NULL, 0, "\x05\x00\x00\x00ab", 6, io) == BR_ERR_INVALID_ARGUMENT, "truncated block");
	CHECK(strstr(br_last_error(), "header") != NULL, "error names the header block: %s", br_last_error());
	CHECK(io[2] == 0 && br_release(router, extra[0]) == 0, "released although the route failed");
	io[2] = held[2][0];
	decision = br_release_then_route(router, "burst", 5, NULL, 0, io);
	CHECK(BR_DECISION_BRANCH(decision) == BR_BRANCH_EXPLICIT_ROUTING_KEY_HIT, "key, no headers");
	CHECK(br_release(router, held[2][0]) == 0, "released by br_release_then_route");
	held[2][0] = io[0];
	for (int i = 0; i < 3; i++) {
		CHECK(br_release(router, held[i][0]) == 1, "release burst %d", i);
	}

	// Statistics come back as JSON; a too-small buffer reports the size it needs.
	int64_t need = br_workers_json(router, NULL, 0);
	CHECK(need > 2, "workers_json length %lld", (long long)need);
	char *json = calloc((size_t)need + 1, 1);
	CHECK(br_workers_json(router, json, (size_t)need) == need, "workers_json");
	CHECK(strstr(json, "\"load\":0") != NULL && strstr(json, "\"load\":1") == NULL, "all loads 0: %s", json);
	free(json);

	// Errors are status codes with text, never crashes.
	CHECK(br_remove_worker(router, "http://nope", 11) == BR_ERR_UNKNOWN_WORKER, "unknown worker");
	CHECK(strstr(br_last_error(), "http://nope") != NULL, "error names the worker: %s", br_last_error());
	CHECK(br_add_worker(router, "http://w0:8000", 14) == BR_ERR_DUPLICATE_WORKER, "duplicate worker");
	CHECK(br_add_worker(router, "HTTP://w0:8000/", 15) == BR_ERR_DUPLICATE_WORKER, "the same worker in another spelling");
	// contract: "Workers and membership": a URL without a scheme is refused, naming it and the rule.
	CHECK(br_add_worker(router, "w9:8000", 7) == BR_ERR_INVALID_ARGUMENT, "worker URL without a scheme");
	CHECK(strstr(br_last_error(), "\"w9:8000\" has no scheme") != NULL, "error names the URL and rule: %s", br_last_error());
	CHECK(br_router_new("{\"policy\": {\"type\": \"nope\"}}", 28, &router) == BR_ERR_INVALID_ARGUMENT, "bad config");
	CHECK(strstr(br_last_error(), "policy") != NULL, "error names the policy: %s", br_last_error());

	CHECK(br_router_free(router) == BR_OK, "free");
	CHECK(br_router_free(router) == BR_ERR_INVALID_HANDLE, "double free");
	CHECK(route(router, "k", first) == BR_ERR_INVALID_HANDLE, "route on a closed router");

	// hash_ring "smg" through the JSON config: three keys SMG 1.13.0 placed in front of these two
	// workers (tests/testdata/smg_ring_2.json) land as it placed them: the first two on
	// :42597, the third on :34219. The default ring would put the first with the third.
	const char *smg_config =
		"{\"worker_urls\": [\"http://127.0.0.1:42597\", \"http://127.0.0.1:34219\"],"
		" \"policy\": {\"type\": \"consistent_hashing\", \"hash_ring\": \"smg\"}}";
	uint64_t smg_router = 0, a[2], b[2], c[2];
	CHECK(br_router_new((char *)smg_config, strlen(smg_config), &smg_router) == BR_OK, "router_new with hash_ring smg");
	CHECK(route(smg_router, "session-509566391", a) >= 0 && route(smg_router, "session-631827746", b) >= 0 &&
			  route(smg_router, "session-22242603", c) >= 0,
		  "smg routes");
	CHECK(chosen(a) == chosen(b) && chosen(a) != chosen(c), "SMG's placement: %u %u %u", chosen(a), chosen(b), chosen(c));
	CHECK(br_router_free(smg_router) == BR_OK, "free the smg router");
	const char *bad_ring = "{\"policy\": {\"type\": \"consistent_hashing\", \"hash_ring\": \"md5\"}}";
	CHECK(br_router_new((char *)bad_ring, strlen(bad_ring), &smg_router) == BR_ERR_INVALID_ARGUMENT, "bad hash_ring");
	CHECK(strstr(br_last_error(), "hash_ring") != NULL, "error names hash_ring: %s", br_last_error());

	// Prefix block hashes: values the xxhash package (Python, an independent XXH64) gives for
	// xxh64("abcd") and xxh64(le64(that) + "efgh"); the partial block "ij" is left out.
	uint64_t blocks[3] = {0, 0, 0};
	CHECK(br_prefix_blocks("abcdefghij", 10, 4, blocks, 3) == 2, "two full blocks");
	CHECK(blocks[0] == 0xde0327b0d25d92ccULL && blocks[1] == 0x3130a33abbb35194ULL && blocks[2] == 0,
		  "chained XXH64: %llx %llx %llx", (unsigned long long)blocks[0], (unsigned long long)blocks[1],
		  (unsigned long long)blocks[2]);
	CHECK(br_prefix_blocks("abcdefgh", 8, 0, blocks, 3) == BR_ERR_INVALID_ARGUMENT, "block_len 0");
	CHECK(strstr(br_last_error(), "block_len") != NULL, "error names block_len: %s", br_last_error());
	CHECK(br_prefix_blocks("abcdefgh", 8, 4, NULL, 2) == BR_ERR_INVALID_ARGUMENT, "NULL out");
	CHECK(br_prefix_blocks("abcdefgh", 8, 4, blocks, 1) == BR_ERR_INVALID_ARGUMENT, "out too small");
	CHECK(strstr(br_last_error(), "out") != NULL, "error names out: %s", br_last_error());
	CHECK(br_prefix_blocks("abc", 3, 4, NULL, 0) == 0, "no full block: nothing to write");
	check_weighted_requests();
	check_worker_failures();
	check_first_token();
	check_report_load();
	check_peer_route();
	check_peer_routes_feed();
	// manual with routing_key_headers through the JSON config: a key read from X-Session-Id keeps
	// its worker; its branch code (above 15) survives the packed decision's branch bits.
	const char *manual_config =
		"{\"worker_urls\": [\"http://w0:8000\", \"http://w1:8000\", \"http://w2:8000\"],"
		" \"policy\": {\"type\": \"manual\", \"assignment_mode\": \"min_load\", \"max_keys\": 8},"
		" \"routing_key_headers\": [\"X-Session-Id\"]}";
	uint64_t manual_router = 0, mio[3] = {0, 0, 0};
	CHECK(br_router_new(manual_config, strlen(manual_config), &manual_router) == BR_OK, "router_new manual");
	// One header, as capi/headers.go frames it: uint32 name length, name, uint32 value length, value.
	const char block[] = "\x0c\0\0\0X-Session-Id\x01\0\0\0s";
	int64_t d1 = br_release_then_route(manual_router, NULL, 0, block, sizeof block - 1, mio);
	CHECK(d1 >= 0 && BR_DECISION_BRANCH(d1) == BR_BRANCH_MANUAL_VACANT, "manual vacant: %lld", (long long)d1);
	mio[2] = mio[0]; // release the previous lease with the next route
	int64_t d2 = br_release_then_route(manual_router, NULL, 0, block, sizeof block - 1, mio);
	CHECK(d2 >= 0 && BR_DECISION_BRANCH(d2) == BR_BRANCH_MANUAL_OCCUPIED_HIT, "manual hit: %lld", (long long)d2);
	CHECK(BR_DECISION_WORKER_ID(d1) == BR_DECISION_WORKER_ID(d2), "the key kept its worker");
	mio[2] = mio[0]; // release the previous lease with the next route
	int64_t d3 = br_release_then_route(manual_router, NULL, 0, NULL, 0, mio);
	CHECK(d3 >= 0 && BR_DECISION_BRANCH(d3) == BR_BRANCH_MANUAL_NO_ROUTING_KEY, "no key: %lld", (long long)d3);
	CHECK(BR_BRANCH_COUNT - 1 <= (1 << BR_DECISION_BRANCH_BITS) - 1, "every branch fits the branch bits");
	CHECK(br_router_free(manual_router) == BR_OK, "free the manual router");
	const char *smg_only = "{\"policy\": {\"type\": \"bucket\"}}";
	CHECK(br_router_new(smg_only, strlen(smg_only), &manual_router) == BR_ERR_INVALID_ARGUMENT, "bucket refused");
	CHECK(strstr(br_last_error(), "exists in SMG but is not implemented by bounded-router") != NULL, "says so: %s", br_last_error());
	const char *bad_headers = "{\"routing_key_headers\": [\"a b\"]}";
	CHECK(br_router_new(bad_headers, strlen(bad_headers), &manual_router) == BR_ERR_INVALID_ARGUMENT, "bad header name");
	CHECK(strstr(br_last_error(), "routing_key_headers") != NULL, "error names routing_key_headers: %s", br_last_error());

	if (failures) {
		fprintf(stderr, "C API: %d checks failed\n", failures);
		return 1;
	}
	printf("C API: all checks passed\n");
	return 0;
}
