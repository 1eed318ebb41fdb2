"""The seccomp filter every sandboxed command runs under (bubblewrap's `--seccomp FD`): a small classic-BPF
program written here, no libseccomp.

What it refuses, and why:
- `fallocate` (EOPNOTSUPP): it takes disk space at once, many times the write quota between two of its
  checks, and with FALLOC_FL_KEEP_SIZE on ext4 past `ulimit -f` too. glibc's `posix_fallocate` then
  falls back to writing the blocks, which `ulimit -f` bounds; the `fallocate` tool fails.
- `io_uring_setup` (ENOSYS, as if the kernel had none): io_uring's requests are not system calls, so a
  filter cannot see an IORING_OP_FALLOCATE; programs that use io_uring fall back to plain calls.

Numbers for x86_64 (and its x32 ABI), i386, aarch64 and 32-bit arm; other architectures pass through
(ribbit's sandbox runs on Linux x86_64 and arm64).
"""

from __future__ import annotations

import errno
import os
import struct

# seccomp_data: int nr; __u32 arch; ...
_NR_OFFSET = 0
_ARCH_OFFSET = 4
_LD_ABS_W = 0x20  # BPF_LD | BPF_W | BPF_ABS
_JEQ_K = 0x15  # BPF_JMP | BPF_JEQ | BPF_K
_JA = 0x05  # BPF_JMP | BPF_JA
_RET_K = 0x06  # BPF_RET | BPF_K
_RET_ALLOW = 0x7FFF0000
_RET_ERRNO = 0x00050000
_X32_BIT = 0x40000000

AUDIT_ARCH_X86_64 = 0xC000003E
AUDIT_ARCH_I386 = 0x40000003
AUDIT_ARCH_AARCH64 = 0xC00000B7
AUDIT_ARCH_ARM = 0x40000028

FALLOCATE = {AUDIT_ARCH_X86_64: 285, AUDIT_ARCH_I386: 324, AUDIT_ARCH_AARCH64: 47, AUDIT_ARCH_ARM: 352}
IO_URING_SETUP = {AUDIT_ARCH_X86_64: 425, AUDIT_ARCH_I386: 425, AUDIT_ARCH_AARCH64: 425, AUDIT_ARCH_ARM: 425}


def refused_calls() -> dict[int, list[tuple[int, int]]]:
    """Per architecture: (system call number, errno it returns)."""
    rules: dict[int, list[tuple[int, int]]] = {}
    for arch in FALLOCATE:
        rules[arch] = [(FALLOCATE[arch], errno.EOPNOTSUPP), (IO_URING_SETUP[arch], errno.ENOSYS)]
    # x32 processes run on x86_64 with the same numbers plus a marker bit.
    rules[AUDIT_ARCH_X86_64] += [(nr | _X32_BIT, err) for nr, err in rules[AUDIT_ARCH_X86_64]]
    return rules


def _insn(code: int, jt: int, jf: int, k: int) -> tuple[int, int, int, int]:
    return (code, jt, jf, k)


def filter_program(rules: dict[int, list[tuple[int, int]]] | None = None) -> bytes:
    """The compiled program (struct sock_filter[], native byte order), as bubblewrap reads it."""
    rules = refused_calls() if rules is None else rules
    program: list[tuple[int, int, int, int]] = [_insn(_LD_ABS_W, 0, 0, _ARCH_OFFSET)]
    jumps: dict[int, int] = {}  # index of a JA -> the architecture it leads to
    for arch in rules:
        program.append(_insn(_JEQ_K, 0, 1, arch))
        jumps[len(program)] = arch
        program.append(_insn(_JA, 0, 0, 0))  # patched below
    program.append(_insn(_RET_K, 0, 0, _RET_ALLOW))
    starts: dict[int, int] = {}
    for arch, calls in rules.items():
        starts[arch] = len(program)
        program.append(_insn(_LD_ABS_W, 0, 0, _NR_OFFSET))
        for nr, err in calls:
            program.append(_insn(_JEQ_K, 0, 1, nr))
            program.append(_insn(_RET_K, 0, 0, _RET_ERRNO | err))
        program.append(_insn(_RET_K, 0, 0, _RET_ALLOW))
    for index, arch in jumps.items():
        program[index] = _insn(_JA, 0, 0, starts[arch] - index - 1)
    return b"".join(struct.pack("=HBBI", *insn) for insn in program)


_PROGRAM = filter_program()


def filter_fd() -> int:
    """A readable descriptor holding the program, for one bubblewrap start (it reads it to the end);
    the caller closes it once the process started."""
    read_fd, write_fd = os.pipe()
    try:
        os.write(write_fd, _PROGRAM)  # a few hundred bytes: well within a pipe's buffer
    finally:
        os.close(write_fd)
    return read_fd
