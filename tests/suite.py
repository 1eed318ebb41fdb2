"""The whole suite, as the README and CI run it: `python -m tests.suite [pytest arguments]`.

Two pytest runs, one after the other (docs/testing.md):
1. every test that can share the machine, on three workers (`-n 3 --dist loadgroup`: the tests of one
   `xdist_group` stay on one worker);
2. the tests tests/tiers.py marks `alone` (llama.cpp: its 2 threads wait for each other at every step, so a
   second worker beside them costs more than it saves), in this one process's child, alone on the machine.
Arguments given go to both runs (`-k`, `-x`, `--durations=20`...). The exit status is the first failing
run's; "no tests collected" (5) only where neither run collected any.
"""

from __future__ import annotations

import shlex
import subprocess
import sys
import time

SHARED = ["-n", "3", "--dist", "loadgroup", "-m", "not alone"]
ALONE = ["-m", "alone"]
NO_TESTS = 5


def main(argv: list[str]) -> int:
    codes = []
    for name, options in ((f"shared ({SHARED[1]} workers)", SHARED), ("alone (llama.cpp, one process)", ALONE)):
        print(f"tests.suite: {name}: pytest {shlex.join(options + argv)}", flush=True)
        started = time.monotonic()
        code = subprocess.call([sys.executable, "-m", "pytest", *options, *argv])
        print(f"tests.suite: {name}: exit {code} in {time.monotonic() - started:.0f} s", flush=True)
        codes.append(code)
    failed = [code for code in codes if code not in (0, NO_TESTS)]
    if failed:
        return failed[0]
    return NO_TESTS if all(code == NO_TESTS for code in codes) else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
