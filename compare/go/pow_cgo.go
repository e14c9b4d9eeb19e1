// pow_cgo.go: pow from the C library, when cgo is available. Rust's f64::powf (used by gen.rs's
// zipfian generator) is the C library's pow on Linux, and Go's math.Pow can differ from it in
// the last bit (ζ(100000) does), which would very rarely move a zipfian pick by one record. With
// cgo the driver calls the same pow as the Rust harness, and the ranks agree bit for bit.

//go:build cgo

package main

// #cgo LDFLAGS: -lm
// #include <math.h>
import "C"

// powExact says whether pow is the C library's (the Rust harness's).
const powExact = true

func pow(x, y float64) float64 { return float64(C.pow(C.double(x), C.double(y))) }
