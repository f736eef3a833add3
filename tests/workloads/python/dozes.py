"""A busy thread that dozes: each round computes for about 20 ms in work() and then sleeps 2 ms in doze()
(time.sleep: a select() with no file descriptors on CPython 3.8-3.10, clock_nanosleep from 3.11), for
SECONDS (default 2) of rounds. One thread, busy ~90% of its time, that waits for no work: no event loop
(crates/cli/tests/python.rs: the doctor finds no too-few-workers)."""
import sys
import time


def work():
    end = time.perf_counter() + 0.02
    n = 0
    while time.perf_counter() < end:
        n += 1
    return n


def doze():
    time.sleep(0.002)


def main(seconds):
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        work()
        doze()


if __name__ == "__main__":
    main(float(sys.argv[1]) if len(sys.argv) > 1 else 2.0)
