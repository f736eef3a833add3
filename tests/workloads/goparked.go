// Goroutines that park: main.napper sleeps 1 ms at a time for N seconds (a timer wakes it) while main.main
// waits for it on a channel. Each park switches the goroutine's thread to its system stack with
// runtime.mcall, where the thread then blocks in the scheduler. Usage: goparked [SECONDS] (default 2).
package main

import (
	"fmt"
	"os"
	"strconv"
	"time"
)

//go:noinline
func napper(end time.Time, done chan<- int) {
	n := 0
	for time.Now().Before(end) {
		time.Sleep(time.Millisecond)
		n++
	}
	done <- n
}

func main() {
	secs := 2.0
	if len(os.Args) > 1 {
		secs, _ = strconv.ParseFloat(os.Args[1], 64)
	}
	done := make(chan int)
	go napper(time.Now().Add(time.Duration(secs*float64(time.Second))), done)
	fmt.Println(<-done, "naps")
}
