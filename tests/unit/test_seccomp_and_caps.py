"""The sandbox's seccomp program, run through a small classic-BPF interpreter for every architecture it
knows (the safety tests run it for real on this machine's), and the default memory cap's arithmetic."""

from __future__ import annotations

import errno
import struct

import pytest

from agent.sandbox.caps import DEFAULT_MAX_PROCESSES, GiB, MIN_MEMORY_BYTES, CapLimits, default_memory_bytes
from agent.sandbox.seccomp import (
    AUDIT_ARCH_AARCH64,
    AUDIT_ARCH_ARM,
    AUDIT_ARCH_I386,
    AUDIT_ARCH_X86_64,
    FALLOCATE,
    filter_program,
)

ALLOW = 0x7FFF0000
ERRNO = 0x00050000


def run_filter(program: bytes, arch: int, nr: int) -> int:
    """What the kernel would do for one system call: the program's return value."""
    insns = [struct.unpack("=HBBI", program[i:i + 8]) for i in range(0, len(program), 8)]
    data = struct.pack("=iI", nr, arch)
    acc = pc = 0
    for _ in range(len(insns) + 1):
        code, jt, jf, k = insns[pc]
        if code == 0x20:  # LD W ABS
            acc = struct.unpack("=I", data[k:k + 4])[0]
            pc += 1
        elif code == 0x15:  # JEQ K
            pc += 1 + (jt if acc == k else jf)
        elif code == 0x05:  # JA
            pc += 1 + k
        elif code == 0x06:  # RET K
            return k
        else:
            raise AssertionError(f"unexpected instruction {code:#x}")
    raise AssertionError("the program did not return")


@pytest.mark.parametrize("arch", [AUDIT_ARCH_X86_64, AUDIT_ARCH_I386, AUDIT_ARCH_AARCH64, AUDIT_ARCH_ARM])
def test_fallocate_and_io_uring_are_refused_on_every_architecture(arch: int) -> None:
    program = filter_program()
    assert run_filter(program, arch, FALLOCATE[arch]) == ERRNO | errno.EOPNOTSUPP
    assert run_filter(program, arch, 425) == ERRNO | errno.ENOSYS  # io_uring_setup
    for nr in (0, 1, 2, 3, 57, 59, 231):  # read, write, open, close, fork, execve, exit_group on x86_64
        if nr not in (FALLOCATE[arch], 425):
            assert run_filter(program, arch, nr) == ALLOW


def test_the_x32_abi_is_refused_too() -> None:
    program = filter_program()
    assert run_filter(program, AUDIT_ARCH_X86_64, 0x40000000 | 285) == ERRNO | errno.EOPNOTSUPP
    assert run_filter(program, AUDIT_ARCH_X86_64, 0x40000000 | 0) == ALLOW


def test_another_architecture_passes_through() -> None:
    assert run_filter(filter_program(), 0xC00000F3, FALLOCATE[AUDIT_ARCH_X86_64]) == ALLOW  # riscv64


def test_the_default_memory_cap_leaves_the_model_and_the_desktop_their_room() -> None:
    assert default_memory_bytes(model_bytes=6 * GiB, total=16 * GiB) == 8 * GiB  # 16 - 6 - 2
    assert default_memory_bytes(model_bytes=10 * GiB, total=64 * GiB) == 46 * GiB  # 64 - 10 - 64/8
    assert default_memory_bytes(model_bytes=7 * GiB, total=8 * GiB) == MIN_MEMORY_BYTES


def test_zero_means_no_cap_and_unset_means_the_default() -> None:
    assert CapLimits.from_settings(0, 0) == CapLimits(memory_bytes=None, max_processes=None)
    assert CapLimits.from_settings(100, None) == CapLimits(memory_bytes=100 << 20, max_processes=DEFAULT_MAX_PROCESSES)
