// Goroutines that each recurse deep enough to grow their stack (past its first 8 KB), then exit: much of
// the CPU is the runtime copying stacks (newstack under morestack, on the system stack) for a goroutine
// whose frames (main.deep under main.grow) are on its own stack. Usage: gogrow [SECONDS] (default 2).
package main

import (
	"os"
	"strconv"
	"time"
)

var sink uint64

//go:noinline
func deep(n int) uint64 {
	var pad [256]byte
	pad[n%256] = byte(n)
	if n == 0 {
		return uint64(pad[0])
	}
	return deep(n-1) + uint64(pad[n%256])
}

//go:noinline
func grow(done chan uint64) { done <- deep(30) }

func main() {
	secs := 2.0
	if len(os.Args) > 1 {
		secs, _ = strconv.ParseFloat(os.Args[1], 64)
	}
	end := time.Now().Add(time.Duration(secs * float64(time.Second)))
	done := make(chan uint64)
	for time.Now().Before(end) {
		go grow(done)
		sink += <-done
	}
}
