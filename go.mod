module github.com/bounded-router/bounded-router

go 1.23

require (
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	github.com/stretchr/testify v1.12.1 // indirect
)
