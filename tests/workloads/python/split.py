"""A known split of CPU between Python functions, for whyslow's Python frames (crates/cli/tests/python.rs).
Each round runs fib(n) once from the loop and twice under mix: the same code on the same input, so of the
CPU the rounds take, mix holds 2/3 and fib called from the loop 1/3, whatever the machine's speed or load.
fib recurses n deep, n drawn for each round around N. Usage: split.py SECONDS (stops after that much CPU
time of its own); it sleeps a moment first, so a profiler attached at its start sees it before it runs.
"""
import sys
import time

# fib's depth; each round's is drawn near it by a linear congruence (the random module imports hashlib)
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
    # The clock is read every 16 rounds (a profiler that stops the process to read it stops it in syscalls
    # more often); rounds all of one length (0.31 ms on 3.12) can fall in step with a 1 ms sampling clock.
    end, draw = time.process_time() + seconds, N
    rounds = 0
    while rounds % 16 or time.process_time() < end:
        draw = (draw * 1103515245 + 12345) % 2147483648
        fib(N - 2 + draw // 65536 % 4)
        mix(N - 2 + draw // 65536 % 4)
        rounds += 1
    return rounds


if __name__ == "__main__":
    time.sleep(0.3)
    main(float(sys.argv[1]) if len(sys.argv) > 1 else 5.0)
