// reflection-dispatch (seed 004): a dispatcher calls its handlers through reflect.Value.Call.
// fixed: the handlers are called through a typed function table.
package main

import (
	"os"
	"reflect"
	"time"
)

type Service struct{ n int }

func (s *Service) Add(a, b int) int  { s.n++; return a + b }
func (s *Service) Mul(a, b int) int  { s.n++; return a * b }
func (s *Service) Sub(a, b int) int  { s.n++; return a - b }

var sink int

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
	until := time.Now().Add(2 * time.Second)
	for i := 0; time.Now().Before(until); i++ {
		for k := 0; k < 1000; k++ {
			m := (i + k) % 3
			if fixed {
				sink += table[m](i, k)
			} else {
				out := methods[m].Call([]reflect.Value{reflect.ValueOf(i), reflect.ValueOf(k)})
				sink += int(out[0].Int())
			}
		}
	}
}
