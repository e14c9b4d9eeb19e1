// pow_nocgo.go: without cgo, pow is Go's math.Pow, which can differ from the C library's (Rust's
// f64::powf) in the last bit; see pow_cgo.go.

//go:build !cgo

package main

import "math"

// powExact says whether pow is the C library's (the Rust harness's).
const powExact = false

func pow(x, y float64) float64 { return math.Pow(x, y) }
