// pprofserv: an HTTP server exposing net/http/pprof while it is busy with a known problem (seed 004):
// every request dispatches its work through reflect.Value.Call. Two goroutines of its own keep sending
// requests, so it is under load without an external tool.
//
// usage: pprofserv PORT [SECONDS]   (PORT 0: pick one; the port is printed on the first line of stdout;
// the server exits after SECONDS, default 120, or when stdin is closed)
package main

import (
	"fmt"
	"io"
	"net"
	"net/http"
	_ "net/http/pprof"
	"os"
	"reflect"
	"strconv"
	"time"
)

type Service struct{ n int }

func (s *Service) Add(a, b int) int { s.n++; return a + b }
func (s *Service) Mul(a, b int) int { s.n++; return a * b }
func (s *Service) Sub(a, b int) int { s.n++; return a - b }

var methods []reflect.Value

// dispatch calls the handlers by name through reflection, as an RPC framework's generic dispatcher would.
func dispatch(i int) int {
	sum := 0
	for k := 0; k < 2000; k++ {
		out := methods[(i+k)%len(methods)].Call([]reflect.Value{reflect.ValueOf(i), reflect.ValueOf(k)})
		sum += int(out[0].Int())
	}
	return sum
}

func work(w http.ResponseWriter, r *http.Request) {
	i, _ := strconv.Atoi(r.URL.Query().Get("i"))
	fmt.Fprintf(w, "%d\n", dispatch(i))
}

func load(port int) {
	client := &http.Client{Timeout: 5 * time.Second}
	for i := 0; ; i++ {
		resp, err := client.Get(fmt.Sprintf("http://127.0.0.1:%d/work?i=%d", port, i))
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
	v := reflect.ValueOf(&Service{})
	for _, n := range []string{"Add", "Mul", "Sub"} {
		methods = append(methods, v.MethodByName(n))
	}
	ln, err := net.Listen("tcp", "127.0.0.1:"+port)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	chosen := ln.Addr().(*net.TCPAddr).Port
	fmt.Println(chosen)
	http.HandleFunc("/work", work)
	for g := 0; g < 2; g++ {
		go load(chosen)
	}
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
