// reflection-dispatch on a server (seed 004): a net/http RPC endpoint whose handler runs each request's
// batch of calls through reflect.Value.Call. fixed: through a typed function table.
// Listens on 127.0.0.1 (a free port, printed first) until killed.
package main

import (
	"fmt"
	"net"
	"net/http"
	"os"
	"reflect"
	"strconv"
)

type Service struct{ n int }

func (s *Service) Add(a, b int) int { s.n++; return a + b }
func (s *Service) Mul(a, b int) int { s.n++; return a * b }
func (s *Service) Sub(a, b int) int { s.n++; return a - b }

func main() {
	fixed := len(os.Args) > 1 && os.Args[1] == "fixed"
	svc := &Service{}
	names := []string{"Add", "Mul", "Sub"}
	v := reflect.ValueOf(svc)
	methods := make([]reflect.Value, len(names))
	for i, n := range names {
		methods[i] = v.MethodByName(n)
	}
	table := []func(int, int) int{svc.Add, svc.Mul, svc.Sub}
	http.HandleFunc("/rpc", func(w http.ResponseWriter, r *http.Request) {
		sum := 0
		for k := 0; k < 2000; k++ {
			m := k % 3
			if fixed {
				sum += table[m](k, 7)
			} else {
				out := methods[m].Call([]reflect.Value{reflect.ValueOf(k), reflect.ValueOf(7)})
				sum += int(out[0].Int())
			}
		}
		w.Write([]byte(strconv.Itoa(sum)))
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	fmt.Println(ln.Addr().(*net.TCPAddr).Port)
	os.Stdout.Sync()
	http.Serve(ln, nil)
}
