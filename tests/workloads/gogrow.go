// Goroutines that each recurse deep enough to grow their stack (past its first 8 KB), then exit: much of
// the CPU is the runtime copying stacks (newstack under morestack, on the system stack) for a goroutine
// whose frames (main.deep under main.grow) are on its own stack. Usage: gogrow [SECONDS] (default 2): the
// seconds of CPU time it runs for (its own, so a busy machine gives the same samples, only later).
package main

import (
	"os"
	"strconv"
	"syscall"
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
	want := time.Duration(secs * float64(time.Second))
	done := make(chan uint64)
	// The clock is read every 64 goroutines: a system call beside each would be much of the profile.
	for i := 1; i%64 != 0 || cpuTime() < want; i++ {
		go grow(done)
		sink += <-done
	}
}

// cpuTime is the CPU time the process has run (user and system).
func cpuTime() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
