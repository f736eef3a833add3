// goleak: a Go program that leaks a known amount into a global slice and serves net/http/pprof.
//
// usage: goleak MB SECONDS   prints the pprof port on the first line of stdout, then waits for a line on
// stdin; at that line it leaks MB megabytes (MB x 256 objects of 4 KiB, allocated by main.leak and kept in
// a global slice) evenly over SECONDS, with churn beside it (main.churn allocates as much again and keeps
// none, so the collector runs as in a busy program), then prints "leaked BYTES bytes in OBJECTS objects".
// It exits 120 s after the leak ends or when stdin is closed.
//
// Its heap profile samples one allocation every 64 KiB on average (runtime.MemProfileRate, set first
// thing), not Go's default 512 KiB: 200 MB of 4 KiB objects is then ~3100 samples, a standard error of
// ~1.8% on what the profile says was leaked (~5% at the default).
package main

import (
	"bufio"
	"fmt"
	"net"
	"net/http"
	_ "net/http/pprof"
	"os"
	"runtime"
	"strconv"
	"time"
)

const objectSize = 4096

var kept [][]byte

// leak allocates n objects of 4 KiB and keeps every one.
//
//go:noinline
func leak(n int) {
	for i := 0; i < n; i++ {
		b := make([]byte, objectSize)
		b[0] = byte(i)
		kept = append(kept, b)
	}
}

var sink []byte

// churn allocates n objects of 4 KiB and keeps none.
//
//go:noinline
func churn(n int) {
	for i := 0; i < n; i++ {
		sink = make([]byte, objectSize)
		sink[0] = byte(i)
	}
	sink = nil
}

func main() {
	runtime.MemProfileRate = 64 << 10
	mb, _ := strconv.Atoi(os.Args[1])
	seconds, _ := strconv.ParseFloat(os.Args[2], 64)
	n := mb * 256
	// The slice's array is allocated here, so its growth is not counted under main.leak.
	kept = make([][]byte, 0, n)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	fmt.Println(ln.Addr().(*net.TCPAddr).Port)
	go http.Serve(ln, nil)
	in := bufio.NewScanner(os.Stdin)
	if !in.Scan() {
		return
	}
	// Evenly over the seconds asked: a step every 10 ms.
	steps := int(seconds * 100)
	if steps < 1 {
		steps = 1
	}
	start := time.Now()
	done := 0
	for k := 1; k <= steps; k++ {
		m := n*k/steps - done
		leak(m)
		churn(m)
		done += m
		time.Sleep(time.Until(start.Add(time.Duration(k) * 10 * time.Millisecond)))
	}
	fmt.Printf("leaked %d bytes in %d objects\n", n*objectSize, n)
	go func() {
		time.Sleep(120 * time.Second)
		os.Exit(0)
	}()
	for in.Scan() {
	}
}
