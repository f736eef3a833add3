"""Python whose CPU goes to a C extension, for the doctor's python-c-extension rule
(crates/cli/tests/python.rs). Usage: cext.py SECONDS: squeeze compresses a 260 KB block with zlib
(the zlib module, a C extension, and libz under it) at the highest level, again and again, until the
process has used SECONDS of CPU time: nearly all of it in native code, called from one Python line.
"""
import sys
import time
import zlib

# Varied but compressible text (deflate searches its matches: its slow path at level 9), made by C code
# at once: "[0, 1, 2, ..., 39999]".
BLOCK = str(list(range(40000))).encode()


def squeeze(data, seconds):
    end = time.process_time() + seconds
    out = 0
    while time.process_time() < end:
        out += len(zlib.compress(data, 9))
    return out


if __name__ == "__main__":
    squeeze(BLOCK, float(sys.argv[1]))
