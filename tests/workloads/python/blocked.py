"""Threads parked in known Python functions, for `whyslow stacks`: the main thread reads an empty pipe in
wait_here (line READ_LINE), a thread "spinner" loops in spin_here. Prints its pid and "ready" once both
run; never ends (the test kills it)."""
import os
import sys
import threading

READ_LINE = 14


def wait_here(fd):
    # The read below is on line READ_LINE.
    while True:
        os.read(fd, 1)


def spin_here():
    n = 0
    while True:
        n += 1


def main():
    r, _w = os.pipe()
    t = threading.Thread(target=spin_here, name="spinner", daemon=True)
    t.start()
    print(os.getpid(), "ready", flush=True)
    wait_here(r)


if __name__ == "__main__":
    sys.exit(main())
