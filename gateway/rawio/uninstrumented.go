//go:build !race && !msan && !asan

package rawio

const instrumented = false
