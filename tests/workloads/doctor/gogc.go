// gc-pressure: every request builds a fresh linked list of small records and drops it.
// fixed: the records come from a slice reused across requests.
package main

import (
	"os"
	"syscall"
)

type record struct {
	id   int
	name []byte
	next *record
}

var sink int

func handleBad(n int) int {
	var head *record
	for i := 0; i < n; i++ {
		head = &record{id: i, name: make([]byte, 48), next: head}
	}
	s := 0
	for r := head; r != nil; r = r.next {
		s += r.id + len(r.name)
	}
	return s
}

var pool = make([]record, 0, 1024)
var names = make([]byte, 48*1024)

func handleFixed(n int) int {
	pool = pool[:0]
	for i := 0; i < n; i++ {
		pool = append(pool, record{id: i, name: names[i*48 : (i+1)*48]})
	}
	s := 0
	for i := range pool {
		s += pool[i].id + len(pool[i].name)
	}
	return s
}

func main() {
	fixed := len(os.Args) > 1 && os.Args[1] == "fixed"
	// Two seconds of the process's CPU time (every thread's, the collector's too): as many samples on a
	// busy machine as on an idle one.
	for cpuSeconds() < 2 {
		for k := 0; k < 100; k++ {
			if fixed {
				sink += handleFixed(1000)
			} else {
				sink += handleBad(1000)
			}
		}
	}
}

func cpuSeconds() float64 {
	var u syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &u) != nil {
		return 1e9
	}
	return float64(u.Utime.Nano()+u.Stime.Nano()) / 1e9
}
