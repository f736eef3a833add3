"""Code made at run time, one function at a time: each round compiles a new function with exec (tick_I,
then tock_I, in a file named "<round I>"), runs it (tick_I spins 100 ms, tock_I 300 ms: a quarter of the
spinning is in the ticks) and drops it, so the next round's code objects take the freed ones' addresses.
For SECONDS (default 4) of rounds (crates/cli/tests/python.rs: each sample under the function that ran)."""
import sys
import time

SOURCE = """
def {name}():
    end = perf_counter() + {seconds}
    while perf_counter() < end:
        pass
"""


def main(seconds):
    end = time.monotonic() + seconds
    i = 0
    while time.monotonic() < end:
        name, secs = ("tick_%d" % i, 0.1) if i % 2 == 0 else ("tock_%d" % i, 0.3)
        space = {"perf_counter": time.perf_counter}
        exec(compile(SOURCE.format(name=name, seconds=secs), "<round %d>" % i, "exec"), space)
        space[name]()
        space.clear()  # the function and its globals hold each other: freed now, not by the GC
        i += 1
    print(i)


if __name__ == "__main__":
    main(float(sys.argv[1]) if len(sys.argv) > 1 else 4.0)
