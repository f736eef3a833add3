// main.main calls the non-inlined main.burn for N seconds. Usage: gowork [SECONDS] (default 2).
package main

import (
	"os"
	"strconv"
	"time"
)

var sink uint64

//go:noinline
func burn(end time.Time) {
	x := sink + 1
	for time.Now().Before(end) {
		for i := 0; i < 20000; i++ {
			x ^= x << 13
			x ^= x >> 7
			x ^= x << 17
		}
	}
	sink = x
}

func main() {
	secs := 2.0
	if len(os.Args) > 1 {
		secs, _ = strconv.ParseFloat(os.Args[1], 64)
	}
	burn(time.Now().Add(time.Duration(secs * float64(time.Second))))
}
