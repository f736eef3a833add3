// Test workload for whyslow-gopclntab: every construct whose name or position the table must
// reproduce. Lines marked `// MARK:name` are looked up by the Rust tests, so moving code is safe.
package main

import (
	"fmt"
	"os"
	"strconv"
)

// Counter gives a pointer-receiver method and a value-receiver method.
type Counter struct{ n int }

//go:noinline
func (c *Counter) Add(d int) int {
	c.n += d
	return c.n
}

//go:noinline
func (c Counter) Value() int { return c.n }

// leaf is small enough to be inlined into middle.
func leaf(x int) int {
	return x*3 + len(os.Args) // MARK:leaf_body
}

// middle is small enough to be inlined into outer, carrying leaf with it.
func middle(x int) int {
	return leaf(x+1) * 7 // MARK:middle_calls_leaf
}

//go:noinline
func outer(x int) int {
	y := middle(x) // MARK:outer_calls_middle
	return y + 2
}

// Map is generic: its instantiation is named after a shape.
//
//go:noinline
func Map[T any](xs []T, f func(T) T) []T {
	out := make([]T, 0, len(xs))
	for _, x := range xs {
		out = append(out, f(x))
	}
	return out
}

//go:noinline
func makeAdder(k int) func(int) int {
	return func(v int) int { return v + k }
}

//go:noinline
func spin(n int) int {
	s := 0
	for i := 0; i < n; i++ {
		s += i ^ (s >> 3)
	}
	return s
}

func main() {
	n := 3
	if len(os.Args) > 1 {
		n, _ = strconv.Atoi(os.Args[1])
	}
	c := &Counter{}
	c.Add(n)
	add := makeAdder(n)
	xs := Map([]int{1, 2, 3}, add)
	ss := Map([]string{"a", "b"}, func(s string) string { return s + "!" })
	fmt.Println(c.Value(), outer(n), xs, ss, spin(n))
}
