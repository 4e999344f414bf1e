// Package bench holds only the benchmarks of the Go binding against
// go-redis (bench_test.go; `make bench` in bindings-go). It is a module of
// its own so that the module tinystore, which programs take in with a
// replace directive, does not require a Redis client.
package bench
