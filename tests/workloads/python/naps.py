"""Off-CPU time in known Python functions: each round sleeps 50 ms in short_nap and 150 ms in long_nap
(a quarter of the sleeping in short_nap), for SECONDS (default 2) of rounds."""
import sys
import time


def short_nap():
    time.sleep(0.05)


def long_nap():
    time.sleep(0.15)


def main(seconds):
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        short_nap()
        long_nap()


if __name__ == "__main__":
    main(float(sys.argv[1]) if len(sys.argv) > 1 else 2.0)
