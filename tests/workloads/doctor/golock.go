// lock-contention in Go: four goroutines update shared statistics under one sync.Mutex, doing their
// per-item work while holding it; the goroutines that wait park on the mutex and their threads go idle.
// fixed: each goroutine works on its own and merges once at the end. Runs 3 s.
package main

import (
	"fmt"
	"os"
	"sync"
	"time"
)

var (
	mu    sync.Mutex
	total uint64
	fixed = len(os.Args) > 1 && os.Args[1] == "fixed"
)

//go:noinline
func workItem(x uint64) uint64 {
	for i := 0; i < 20000; i++ {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
	}
	return x
}

//go:noinline
func addSample(mine *uint64, seed uint64) {
	if fixed {
		*mine += workItem(seed)
		return
	}
	mu.Lock()
	total += workItem(seed + total)
	mu.Unlock()
}

func worker(seed uint64, until time.Time, wg *sync.WaitGroup) {
	defer wg.Done()
	var mine uint64
	for time.Now().Before(until) {
		for i := 0; i < 10; i++ {
			addSample(&mine, seed)
			seed++
		}
	}
	mu.Lock()
	total += mine
	mu.Unlock()
}

func main() {
	until := time.Now().Add(3 * time.Second)
	var wg sync.WaitGroup
	for i := 0; i < 4; i++ {
		wg.Add(1)
		go worker(uint64(i)<<32|1, until, &wg)
	}
	wg.Wait()
	fmt.Fprintln(os.Stderr, "total", total)
}
