package main

import (
	"reflect"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/bounded-router/bounded-router/core"
	"github.com/bounded-router/bounded-router/health"
)

// br_route_request and br_route_requests called as C would call them, with br_request values laid
// out as capi/bounded_router.h declares the struct (checked against cgo's view of it below).

// cRequest is br_request as the public header declares it, field for field.
type cRequest struct {
	key             *byte
	keyLen          uintptr
	headers         *byte
	headersLen      uintptr
	weight          int64
	prefixBlocks    *uint64
	prefixBlocksLen uintptr
}

func keyRequest(key string, weight int64, blocks ...uint64) cRequest {
	req := cRequest{weight: weight}
	if key != "" {
		req.key, req.keyLen = unsafe.StringData(key), uintptr(len(key))
	}
	if len(blocks) > 0 {
		req.prefixBlocks, req.prefixBlocksLen = &blocks[0], uintptr(len(blocks))
	}
	return req
}

// call calls an export with its cgo-typed parameters made by reflection from plain values: a test
// file cannot name cgo's types. Pointers are passed as unsafe.Pointer, NULL as nil.
func call(export any, args ...any) int64 {
	fn := reflect.ValueOf(export)
	in := make([]reflect.Value, len(args))
	for i, a := range args {
		typ := fn.Type().In(i)
		switch v := a.(type) {
		case nil:
			in[i] = reflect.Zero(typ)
		case unsafe.Pointer:
			in[i] = reflect.Zero(typ)
			if v != nil {
				in[i] = reflect.NewAt(typ.Elem(), v)
			}
		default:
			in[i] = reflect.ValueOf(a).Convert(typ)
		}
	}
	return fn.Call(in)[0].Int()
}

func testRouter(t *testing.T, n int) (uint64, *core.Router, []string) {
	t.Helper()
	urls := make([]string, n)
	for i := range urls {
		urls[i] = "http://w" + string(rune('0'+i)) + ":8000"
	}
	cfg := core.DefaultConfig(urls...)
	cfg.Policy.MinLoadGap = 1 << 40 // no spill: a key stays on its worker whatever the weights
	r, err := core.NewRouter(cfg)
	require.NoError(t, err)
	h := registerRouter(health.New(r, health.Options{}))
	t.Cleanup(func() { _ = unregisterRouter(h) })
	return h, r, urls
}

func loads(r *core.Router) map[string]int64 {
	m := map[string]int64{}
	for _, w := range r.Workers() {
		m[w.URL] = w.Load
	}
	return m
}

func TestRequestStructLayoutMatchesTheHeader(t *testing.T) {
	c := reflect.TypeOf(br_route_request).In(1).Elem()
	g := reflect.TypeOf(cRequest{})
	require.Equal(t, g.Size(), c.Size())
	require.Equal(t, g.NumField(), c.NumField())
	for i := 0; i < g.NumField(); i++ {
		assert.Equal(t, g.Field(i).Offset, c.Field(i).Offset, "field %d (%s)", i, c.Field(i).Name)
	}
}

func TestRouteRequestCountsTheWeight(t *testing.T) {
	h, r, _ := testRouter(t, 3)
	out := make([]uint64, 2)
	req := keyRequest("session-1", 700, 11, 12, 13)
	branch := call(br_route_request, h, unsafe.Pointer(&req), 1, unsafe.Pointer(&out[0]))
	require.EqualValues(t, core.BranchExplicitRoutingKeyHit, branch)
	url, _, ok := r.LeaseWorkers(core.LeaseID(out[0]))
	require.True(t, ok)
	assert.EqualValues(t, 700, loads(r)[url])

	// Weight 0 means 1, and the key goes where br_route_key sends it.
	zero := keyRequest("session-1", 0)
	again := make([]uint64, 2)
	call(br_route_request, h, unsafe.Pointer(&zero), 1, unsafe.Pointer(&again[0]))
	assert.Equal(t, out[1], again[1])
	assert.EqualValues(t, 701, loads(r)[url])

	// A selection counts nothing.
	sel := make([]uint64, 2)
	call(br_route_request, h, unsafe.Pointer(&req), 0, unsafe.Pointer(&sel[0]))
	assert.Zero(t, sel[0])
	assert.Equal(t, out[1], sel[1])
	assert.EqualValues(t, 701, loads(r)[url])
}

func TestRouteRequestRefusesBadInputsNamingTheField(t *testing.T) {
	h, r, _ := testRouter(t, 2)
	out := make([]uint64, 2)
	blocks := make([]uint64, core.MaxPrefixBlocks+1)
	for _, c := range []struct {
		req  cRequest
		want string
	}{
		{keyRequest("k", -1), "weight must be an integer from 1 to 1073741824, got -1"},
		{keyRequest("k", core.MaxLeaseWeight+1), "weight must be an integer from 1 to 1073741824, got 1073741825"},
		{keyRequest("k", 1, blocks...), "prefix_blocks may hold at most 65536 blocks, got 65537"},
		{cRequest{prefixBlocksLen: 3}, "prefix_blocks is NULL but prefix_blocks_len is 3"},
		{cRequest{keyLen: 2}, "key is NULL but key_len is 2"},
		{cRequest{headers: &[]byte("\x09")[0], headersLen: 1}, "headers: the block is truncated"},
	} {
		assert.EqualValues(t, statusInvalidArgument, call(br_route_request, h, unsafe.Pointer(&c.req), 1, unsafe.Pointer(&out[0])), c.want)
		fn := reflect.ValueOf(requestArg)
		res := fn.Call([]reflect.Value{reflect.ValueOf(r), reflect.NewAt(fn.Type().In(1).Elem(), unsafe.Pointer(&c.req))})
		err, _ := res[1].Interface().(error)
		require.Error(t, err)
		assert.Contains(t, err.Error(), c.want)
	}
	accepted := keyRequest("k", core.MaxLeaseWeight, blocks[:core.MaxPrefixBlocks]...)
	assert.EqualValues(t, core.BranchExplicitRoutingKeyHit, call(br_route_request, h, unsafe.Pointer(&accepted), 1, unsafe.Pointer(&out[0])), "the limits themselves")
	assert.EqualValues(t, statusInvalidArgument, call(br_route_request, h, nil, 1, unsafe.Pointer(&out[0])), "NULL request")
	assert.Equal(t, 1, r.Stats().ActiveLeases)
}

func TestRouteRequestsIsAllOrNothing(t *testing.T) {
	h, r, _ := testRouter(t, 3)
	batch := []cRequest{keyRequest("a", 5), keyRequest("b", 0, 1, 2), keyRequest("a", 7), keyRequest("c", core.MaxLeaseWeight)}
	out := make([]uint64, 3*len(batch))
	require.EqualValues(t, statusOK, call(br_route_requests, h, unsafe.Pointer(&batch[0]), len(batch), unsafe.Pointer(&out[0])))
	want := map[string]int64{}
	for i, w := range []int64{5, 1, 7, core.MaxLeaseWeight} {
		require.NotZero(t, out[i], "lease %d", i)
		url, _, ok := r.LeaseWorkers(core.LeaseID(out[i]))
		require.True(t, ok)
		want[url] += w
		assert.EqualValues(t, core.BranchExplicitRoutingKeyHit, out[len(batch)+i]&0xF)
	}
	for url, load := range loads(r) {
		assert.Equal(t, want[url], load, url)
	}

	before := loads(r)
	bad := []cRequest{keyRequest("a", 1), keyRequest("b", 1), keyRequest("c", -5)}
	clear(out)
	assert.EqualValues(t, statusInvalidArgument, call(br_route_requests, h, unsafe.Pointer(&bad[0]), len(bad), unsafe.Pointer(&out[0])))
	assert.Equal(t, before, loads(r), "nothing routed")
	assert.Equal(t, make([]uint64, len(out)), out, "nothing written")
	assert.Equal(t, len(batch), r.Stats().ActiveLeases)
	assert.EqualValues(t, statusOK, call(br_route_requests, h, nil, 0, nil), "an empty batch")
	assert.EqualValues(t, statusInvalidArgument, call(br_route_requests, h, nil, 2, unsafe.Pointer(&out[0])), "NULL requests")
}

func TestAcquireCountsItsWeight(t *testing.T) {
	h, r, urls := testRouter(t, 2)
	out := make([]uint64, 2)
	url := []byte(urls[1])
	require.EqualValues(t, statusOK, call(br_acquire, h, unsafe.Pointer(&url[0]), len(url), nil, 0, 40, unsafe.Pointer(&out[0])))
	require.EqualValues(t, statusOK, call(br_acquire, h, unsafe.Pointer(&url[0]), len(url), nil, 0, 0, unsafe.Pointer(&out[0])))
	assert.EqualValues(t, 41, loads(r)[urls[1]], "40, then 0 meaning 1")
	for _, w := range []int64{-1, core.MaxLeaseWeight + 1} {
		assert.EqualValues(t, statusInvalidArgument, call(br_acquire, h, unsafe.Pointer(&url[0]), len(url), nil, 0, w, unsafe.Pointer(&out[0])), w)
	}
	assert.Equal(t, 2, r.Stats().ActiveLeases)
}
