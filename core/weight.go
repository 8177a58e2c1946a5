package core

import "fmt"

// MaxLeaseWeight is the largest weight one lease may count. A router holds fewer than 2^32
// leases at once (their slots are numbered with 32 bits), so with weights of at most 2^30 no
// load and no total of loads can reach 2^62, far from overflowing.
const MaxLeaseWeight = 1 << 30

var weightRule = fmt.Sprintf("from 1 to %d", MaxLeaseWeight)

// CheckWeight returns an error naming the field when weight cannot be the weight of a lease.
func CheckWeight(weight int64) error {
	if weight < 1 || weight > MaxLeaseWeight {
		return invalid("weight must be an integer %s, got %d", weightRule, weight)
	}
	return nil
}

// leaseWeight is the weight the request's lease counts: Weight, or 1 when it is 0. An invalid
// weight is a caller's bug (the bindings check weights with CheckWeight), hence the panic.
func (req *Request) leaseWeight() int64 {
	if req.Weight == 0 {
		return 1
	}
	if err := CheckWeight(req.Weight); err != nil {
		panic(err)
	}
	return req.Weight
}
