package core

// selectConsistent is strict consistent hashing: explicit and implicit keys both go to the
// first available worker clockwise from the key, whatever the loads.
func selectConsistent(v *view, req *Request, keyPos uint64) (int, Branch) {
	return selectByPrecedence(v, req, keyPos, func(position uint64) (int, Branch) {
		return v.preferred(position), BranchRoutingKeyHit
	}, BranchRoutingKeyHit)
}
