// gosplit: an HTTP server whose CPU goes to two handlers and the garbage collector, exposing
// net/http/pprof so the program's own profile can be taken over the same seconds. /spin burns a loop
// (main.spin); /churn builds and drops pointer-rich garbage (main.churn), so the allocator's slow paths
// and the collector's mark workers (runtime.gcBgMarkWorker) run on the threads' system stacks. Two
// goroutines of its own send requests to each handler, so it is busy without an external tool.
//
// usage: gosplit PORT [SECONDS]   (PORT 0: pick one; the port is printed on the first line of stdout;
// the server exits after SECONDS, default 120, or when stdin is closed)
package main

import (
	"fmt"
	"io"
	"net"
	"net/http"
	_ "net/http/pprof"
	"os"
	"strconv"
	"time"
)

var sink uint64

//go:noinline
func spin(n int) uint64 {
	x := sink + uint64(n) + 1
	for i := 0; i < n*200000; i++ {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
	}
	return x
}

type node struct {
	next  *node
	left  *node
	value [6]uint64
}

var keep []*node

//go:noinline
func churn(n int) uint64 {
	var head *node
	for i := 0; i < n*4000; i++ {
		head = &node{next: head, left: head}
		head.value[0] = uint64(i)
	}
	// A share survives a while: the collector has live pointers to mark.
	keep = append(keep, head)
	if len(keep) > 8 {
		keep = keep[1:]
	}
	return head.value[0]
}

func handler(work func(int) uint64) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		n, _ := strconv.Atoi(r.URL.Query().Get("n"))
		fmt.Fprintf(w, "%d\n", work(n))
	}
}

func load(port int, path string) {
	client := &http.Client{Timeout: 5 * time.Second}
	for {
		resp, err := client.Get(fmt.Sprintf("http://127.0.0.1:%d%s", port, path))
		if err != nil {
			time.Sleep(10 * time.Millisecond)
			continue
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
}

func main() {
	port := "0"
	if len(os.Args) > 1 {
		port = os.Args[1]
	}
	seconds := 120
	if len(os.Args) > 2 {
		seconds, _ = strconv.Atoi(os.Args[2])
	}
	ln, err := net.Listen("tcp", "127.0.0.1:"+port)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	chosen := ln.Addr().(*net.TCPAddr).Port
	fmt.Println(chosen)
	http.HandleFunc("/spin", handler(spin))
	http.HandleFunc("/churn", handler(churn))
	go load(chosen, "/spin?n=10")
	go load(chosen, "/churn?n=10")
	go func() {
		io.Copy(io.Discard, os.Stdin)
		os.Exit(0)
	}()
	go func() {
		time.Sleep(time.Duration(seconds) * time.Second)
		os.Exit(0)
	}()
	http.Serve(ln, nil)
}
