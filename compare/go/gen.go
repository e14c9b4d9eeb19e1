// gen.go: deterministic records, a port of crates/strata-bench/src/gen.rs. Record i's key and
// value are pure functions of the seed and i (and of its version for a rewritten value), so this
// driver loads, reads and checks exactly the records the Rust harness does. The shared test
// vectors in testdata/vectors.json (written by crates/strata-bench/tests/vectors.rs) pin the two
// implementations together.
package main

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/bits"
)

// gamma is the golden-ratio increment of splitmix64.
const gamma uint64 = 0x9E3779B97F4A7C15

// gammaSquared is gamma·gamma mod 2^64, the step between a record's value versions.
var gammaSquared = func() uint64 { g := gamma; return g * g }()

// Salts that give keys, values and read indices independent streams from one seed.
const (
	keySalt   uint64 = 0x6b657973
	valueSalt uint64 = 0x76616c756573
	readSalt  uint64 = 0x007265616473
)

// The limits strata puts on keys and values (strata::MAX_KEY_LEN, strata::MAX_VALUE_LEN).
const (
	maxKeyLen   = 4096
	maxValueLen = 16 << 20
)

// mix is the splitmix64 output function: a bijection on uint64 with good avalanche.
func mix(z uint64) uint64 {
	z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9
	z = (z ^ (z >> 27)) * 0x94D049BB133111EB
	return z ^ (z >> 31)
}

// Rng is a splitmix64 stream.
type Rng struct{ state uint64 }

func newRng(state uint64) *Rng { return &Rng{state} }

// rngForReads is the stream the read pass draws record indices from.
func rngForReads(seed uint64) *Rng { return newRng(mix(seed ^ readSalt)) }

func (r *Rng) nextU64() uint64 {
	r.state += gamma
	return mix(r.state)
}

// below is uniform in 0..n (n > 0), by multiply-high.
func (r *Rng) below(n uint64) uint64 {
	hi, _ := bits.Mul64(r.nextU64(), n)
	return hi
}

// extend appends n bytes of the stream to out.
func (r *Rng) extend(out []byte, n int) []byte {
	var word [8]byte
	for n > 0 {
		binary.LittleEndian.PutUint64(word[:], r.nextU64())
		take := min(n, 8)
		out = append(out, word[:take]...)
		n -= take
	}
	return out
}

// Order is the key order of a spec: "sequential" or "random".
type Order string

const (
	Sequential Order = "sequential"
	Random     Order = "random"
)

// Records generates records with fixed key and value sizes.
type Records struct {
	order     Order
	keySize   int
	valueSize int
	keyBase   uint64
	valueBase uint64
}

// newRecords refuses sizes for which count distinct keys cannot be guaranteed.
func newRecords(order Order, keySize, valueSize int, seed, count uint64) (*Records, error) {
	if keySize == 0 {
		return nil, fmt.Errorf("the key size must be at least 1 byte")
	}
	if keySize > maxKeyLen {
		return nil, fmt.Errorf("a key size of %d bytes exceeds the maximum of %d", keySize, maxKeyLen)
	}
	if valueSize > maxValueLen {
		return nil, fmt.Errorf("a value size of %d bytes exceeds the maximum of %d", valueSize, maxValueLen)
	}
	if keySize < 8 {
		switch order {
		case Random:
			return nil, fmt.Errorf("random keys need a key size of at least 8 bytes to be distinct, not %d", keySize)
		case Sequential:
			if count > uint64(1)<<(8*keySize) {
				return nil, fmt.Errorf("%d sequential keys do not fit in %d-byte keys", count, keySize)
			}
		}
	}
	if order != Sequential && order != Random {
		return nil, fmt.Errorf("unknown key order %q", order)
	}
	return &Records{
		order:     order,
		keySize:   keySize,
		valueSize: valueSize,
		keyBase:   mix(seed ^ keySalt),
		valueBase: mix(seed ^ valueSalt),
	}, nil
}

// key replaces out's contents with the key of record i.
func (r *Records) key(i uint64, out []byte) []byte {
	out = out[:0]
	var be [8]byte
	switch r.order {
	case Sequential:
		binary.BigEndian.PutUint64(be[:], i)
		if r.keySize >= 8 {
			for j := 0; j < r.keySize-8; j++ {
				out = append(out, 0)
			}
			out = append(out, be[:]...)
		} else {
			out = append(out, be[8-r.keySize:]...)
		}
	case Random:
		head := mix(r.keyBase + i*gamma)
		binary.BigEndian.PutUint64(be[:], head)
		out = append(out, be[:]...)
		out = newRng(head).extend(out, r.keySize-8)
	}
	return out
}

// value replaces out's contents with the value of record i as first loaded.
func (r *Records) value(i uint64, out []byte) []byte { return r.valueVersion(i, 0, out) }

// valueVersion replaces out's contents with the value record i holds after its version-th
// rewrite.
func (r *Records) valueVersion(i, version uint64, out []byte) []byte {
	start := mix(r.valueBase+i*gamma) + version*gammaSquared
	return newRng(start).extend(out[:0], r.valueSize)
}

// zipfTheta is YCSB's default skew.
const zipfTheta = 0.99

// Zipf is YCSB's zipfian distribution over ranks 0..n (rank 0 most popular), constant theta
// (Gray et al., SIGMOD 1994).
type Zipf struct {
	n     uint64
	theta float64
	alpha float64
	zetaN float64
	eta   float64
}

// zeta is the generalised harmonic number sum_{i=1..n} 1/i^theta, summed in index order as
// gen.rs does.
func zeta(n uint64, theta float64) float64 {
	sum := 0.0
	for i := uint64(1); i <= n; i++ {
		sum += 1.0 / pow(float64(i), theta)
	}
	return sum
}

// newZipf costs O(n) once, for zeta(n).
func newZipf(n uint64, theta float64) *Zipf {
	if n == 0 || !(theta > 0 && theta < 1) {
		panic("zipf: n must be positive and theta in (0, 1)")
	}
	zetaN := zeta(n, theta)
	zeta2 := zeta(min(n, 2), theta)
	eta := (1.0 - pow(2.0/float64(n), 1.0-theta)) / (1.0 - zeta2/zetaN)
	return &Zipf{n: n, theta: theta, alpha: 1.0 / (1.0 - theta), zetaN: zetaN, eta: eta}
}

// f64ToU64 converts like Rust's `as u64`: truncation toward zero, saturating, NaN to 0.
func f64ToU64(f float64) uint64 {
	switch {
	case f != f || f <= 0:
		return 0
	case f >= 18446744073709551616.0:
		return math.MaxUint64
	default:
		return uint64(f)
	}
}

// rank is a rank in 0..n; small ranks are the popular ones.
func (z *Zipf) rank(rng *Rng) uint64 {
	u := float64(rng.nextU64()>>11) / float64(uint64(1)<<53)
	uz := u * z.zetaN
	if uz < 1.0 {
		return 0
	}
	if uz < 1.0+pow(0.5, z.theta) {
		return min(1, z.n-1)
	}
	r := f64ToU64(float64(z.n) * pow(z.eta*u-z.eta+1.0, z.alpha))
	return min(r, z.n-1)
}

// scattered is a record index in 0..n whose popularity follows the distribution, the popular
// records scattered (rank r maps to a hash of r, reduced to 0..n).
func (z *Zipf) scattered(rng *Rng) uint64 {
	r := z.rank(rng)
	hi, _ := bits.Mul64(mix(r^keySalt), z.n)
	return hi
}
