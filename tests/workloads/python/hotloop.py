"""A hot pure-Python function, for the doctor's hot-python-code rule (crates/cli/tests/python.rs).

Usage: hotloop.py SECONDS [fixed]. Each round calls spin three times and warm once on the same input:
the same loop in both, so of the rounds' CPU spin holds 3/4 and warm 1/4, whatever the machine's speed
or load. The four calls of a round come in a shuffled order (seeded): rounds in a fixed order are a
period a sampling clock can fall in step with, and then samples land in one function more than its
share. It stops after SECONDS of CPU time of its own. With `fixed`, both add up their numbers with the
builtin sum() (a C loop in the interpreter, no bytecode per number): the same result, no hot Python code.
"""
import random
import sys
import time

N = 20000


def spin(n):
    x = 0
    for i in range(n):
        x += i
    return x


def warm(n):
    x = 0
    for i in range(n):
        x += i
    return x


def spin_fixed(n):
    return sum(range(n))


def warm_fixed(n):
    return sum(range(n))


def main(seconds, hot, cold):
    end = time.process_time() + seconds
    order = random.Random(47)
    calls = [hot, hot, hot, cold]
    total = 0
    while time.process_time() < end:
        order.shuffle(calls)
        for call in calls:
            total += call(N)
    return total


if __name__ == "__main__":
    fixed = sys.argv[2:] == ["fixed"]
    main(float(sys.argv[1]), spin_fixed if fixed else spin, warm_fixed if fixed else warm)
