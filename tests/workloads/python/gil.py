"""CPU-bound Python work spread over threads, for the doctor's gil-contention rule
(crates/cli/tests/python.rs). Usage: gil.py SECONDS THREADS: THREADS threads compute in pure Python
until the process has used SECONDS of CPU time; with more than one, all but the one holding the GIL
wait for it, whatever the machine's cores or load. With one thread the same work raises no GIL waits.
"""
import sys
import threading
import time


def spin(n):
    x = 0
    for i in range(n):
        x += i * i
    return x


def worker(end):
    while time.process_time() < end:
        spin(20000)


def main(seconds, threads):
    end = time.process_time() + seconds
    ts = [threading.Thread(target=worker, args=(end,), name=f"worker{i}") for i in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()


if __name__ == "__main__":
    main(float(sys.argv[1]), int(sys.argv[2]))
