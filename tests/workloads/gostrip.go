// Built twice: with symbols and DWARF (gostrip), and as production ships Go (gostrip_stripped:
// -ldflags="-s -w", then strip). main.step runs exactly N times; each run gives main.hot 3 units of work
// and main.cold 1 (a 75/25 split of CPU time), both through main.mix, which the compiler inlines into
// them. Each step draws its unit's length (80,000-119,999 iterations): steps all of one length could keep
// step with a sampling clock and put its samples at one place in them. main.deep recurses 2000 deep on a
// fresh goroutine's stack, which has to grow: each growth runs a prologue twice (Go's stack check restarts
// the function), which a probe must count once. Usage: gostrip N (default 2000).
package main

import (
	"os"
	"strconv"
)

var sink uint64

// mix is small enough to be inlined into its callers: their samples show it as an inlined frame.
func mix(x uint64) uint64 {
	x ^= x << 13
	x ^= x >> 7
	x ^= x << 17
	return x
}

//go:noinline
func hot(units, unit int) {
	x := sink + 1
	for i := 0; i < units*unit; i++ {
		x = mix(x)
	}
	sink = x
}

//go:noinline
func cold(units, unit int) {
	x := sink + 3
	for i := 0; i < units*unit; i++ {
		x = mix(x)
	}
	sink = x
}

// draw is a linear congruence: the same lengths on every run.
var draw uint64 = 1

//go:noinline
func step() {
	draw = draw*6364136223846793005 + 1442695040888963407
	unit := 80000 + int(draw>>33)%40000
	hot(3, unit)
	cold(1, unit)
}

// deep(n) calls itself n times below the first call: n+1 calls, with a frame big enough that the
// goroutine's stack grows several times on the way down.
//
//go:noinline
func deep(n int) int {
	var pad [128]byte
	pad[n%128] = byte(n)
	if n == 0 {
		return int(pad[0])
	}
	return deep(n-1) + int(pad[(n+1)%128])
}

func main() {
	done := make(chan int)
	go func() { done <- deep(2000) }()
	sink += uint64(<-done)
	n := 2000
	if len(os.Args) > 1 {
		n, _ = strconv.Atoi(os.Args[1])
	}
	for i := 0; i < n; i++ {
		step()
	}
}
