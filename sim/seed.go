package sim

import "math/rand/v2"

// Streams are the named random sub-streams of one seed. Each has its own
// derived seed, so adding a fault rule never perturbs traffic, and adding
// traffic never perturbs latency jitter.
var Streams = []string{"traffic", "faults", "latency", "engine"}

// DeriveSeed derives a named sub-stream's seed from the scenario seed:
// splitmix64 of the seed mixed with the FNV-1a hash of the name.
func DeriveSeed(seed uint64, name string) uint64 {
	h := uint64(14695981039346656037)
	for i := 0; i < len(name); i++ {
		h ^= uint64(name[i])
		h *= 1099511628211
	}
	return splitmix64(seed ^ h)
}

func splitmix64(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}

// newStream returns the PCG generator of a named sub-stream.
func newStream(seed uint64, name string) *rand.Rand {
	d := DeriveSeed(seed, name)
	return rand.New(rand.NewPCG(d, splitmix64(d)))
}

// DerivedSeeds returns every sub-stream's seed, for printing.
func DerivedSeeds(seed uint64) map[string]uint64 {
	out := make(map[string]uint64, len(Streams))
	for _, n := range Streams {
		out[n] = DeriveSeed(seed, n)
	}
	return out
}
