package main

/*
#include <stdint.h>
*/
import "C"

import "github.com/bounded-router/bounded-router/core"

// br_first_token marks a lease as having seen its first token, so its weight leaves its
// worker's prefill load (docs/contract.md, "Prefill load"): 1 when it did, 0 when the lease
// was marked before or is not active, a negative status otherwise.
//
//export br_first_token
func br_first_token(router C.uint64_t, lease C.uint64_t) (status C.int32_t) {
	defer guard(&status)
	r, err := lookupRouter(uint64(router))
	if err != nil {
		return fail(err)
	}
	if r.FirstToken(core.LeaseID(lease)) {
		return 1
	}
	return 0
}
