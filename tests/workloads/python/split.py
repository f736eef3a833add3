"""A known split of CPU between Python functions, for whyslow's Python frames (crates/cli/tests/python.rs).

Each round runs fib(N) once from the loop and twice under mix: the same code on the same input, so of
the CPU the rounds take, mix holds 2/3 and fib called from the loop 1/3, whatever the machine's speed
or load. fib recurses N deep. Usage: split.py SECONDS (stops after that much CPU time of its own); it
sleeps a moment first, so a profiler attached at its start sees it before it runs.
"""
import sys
import time

N = 16


def fib(n):
    if n < 2:
        return n
    return fib(n - 1) + fib(n - 2)


def mix(n):
    a = fib(n)
    b = fib(n)
    return a + b


def main(seconds):
    # The clock is read every 16 rounds: a profiler that stops the process to read it (py-spy) stops it
    # in syscalls more often than elsewhere.
    end = time.process_time() + seconds
    rounds = 0
    while rounds % 16 or time.process_time() < end:
        fib(N)
        mix(N)
        rounds += 1
    return rounds


if __name__ == "__main__":
    time.sleep(0.3)
    main(float(sys.argv[1]) if len(sys.argv) > 1 else 5.0)
