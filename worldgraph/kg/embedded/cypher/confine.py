"""What confines a query child (``child``): Landlock (files, TCP, signals), seccomp (every socket)
and resource limits, applied by the child to itself while it has one thread.

**Landlock** (Linux >= 5.13; the rights below are those of the running kernel's ABI, up to 6)
is a ruleset the process adds to its own credentials: once restricted, neither it nor any thread
or child it makes later may open a file except beneath the paths the ruleset allows, with the
rights allowed there; rulesets stack, each can only narrow. A child calls ``restrict`` twice:
first (before it imports the engine) allowing the Python installation to be read, so the
engine's modules can still load; then (before it opens the projection, the engine's code loaded
and still one thread: ``threads()`` is checked) allowing only the projection file, for reading,
and its private temporary folder. Each ruleset handles every filesystem right the kernel knows,
TCP bind and connect (ABI 4: no port is allowed) and, from ABI 6, signals and abstract Unix
sockets outside the child (it cannot signal the server).

**seccomp** (``no_sockets``, through libseccomp): Landlock does not cover UDP, Unix sockets or
``socketpair``, so every ``socket``/``socketpair`` call fails with EPERM, as do ``io_uring``
(whose requests would bypass the filter), ``ptrace``, ``process_vm_*``, ``execve``, ``bpf``,
``perf_event_open``, ``userfaultfd``, the namespace and mount calls and the key calls. Loaded
with ``no_new_privs`` (which Landlock needs too) and inherited by every later thread.

Both are ctypes over the kernel's system calls and libseccomp's C API: the PyPI bindings found
(``landlock``: development releases only; ``pyseccomp``: last released 2021) are thinner than
what they would replace.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import os
import platform
import resource
from collections.abc import Iterable

__all__ = ["LandlockUnavailable", "abi", "forget_threads", "limit_memory", "no_sockets", "restrict", "threads"]

# landlock_create_ruleset, landlock_add_rule, landlock_restrict_self: the same numbers on every
# architecture (they come after the unified system call table's merge)
_CREATE, _ADD_RULE, _RESTRICT = 444, 445, 446
_PR_SET_NO_NEW_PRIVS = 38
_CREATE_VERSION = 1
_RULE_PATH_BENEATH = 1
# filesystem rights, by the ABI that introduced them
_FS = {1: (1 << 13) - 1, 2: 1 << 13, 3: 1 << 14, 5: 1 << 15}
_READ_FILE, _READ_DIR, _EXECUTE = 1 << 2, 1 << 3, 1 << 0
_FILE_RIGHTS = (1 << 0) | (1 << 1) | (1 << 2) | (1 << 14) | (1 << 15)  # what a rule on a file may allow
_NET_TCP = (1 << 0) | (1 << 1)  # bind, connect (ABI 4)
_SCOPES = (1 << 0) | (1 << 1)  # abstract Unix sockets, signals (ABI 6)


class LandlockUnavailable(OSError):
    """The kernel has no Landlock (not Linux, older than 5.13, or disabled at boot)."""


class _RulesetAttr(ctypes.Structure):
    _fields_ = [("handled_access_fs", ctypes.c_uint64), ("handled_access_net", ctypes.c_uint64),
                ("scoped", ctypes.c_uint64)]


class _PathBeneath(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


_libc = ctypes.CDLL(None, use_errno=True) if platform.system() == "Linux" else None


def _syscall(nr: int, *args: object) -> int:
    assert _libc is not None
    ret = int(_libc.syscall(ctypes.c_long(nr), *args))
    if ret < 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))
    return ret


def abi() -> int:
    """The kernel's Landlock ABI version (0: none)."""
    if _libc is None:
        return 0
    try:
        return _syscall(_CREATE, None, ctypes.c_size_t(0), ctypes.c_uint32(_CREATE_VERSION))
    except OSError:  # ENOSYS (no Landlock), EOPNOTSUPP (disabled at boot)
        return 0


_tasks: int | None = None  # /proc/self/task, opened before the first ruleset (which denies /proc)


def threads() -> int:
    """How many threads this process has (the entries of ``/proc/self/task``; the folder is kept
    open from the first call, since a Landlock ruleset takes /proc away, until ``forget_threads``)."""
    global _tasks
    if _tasks is None:
        _tasks = os.open("/proc/self/task", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    return len(os.listdir(_tasks))


def forget_threads() -> None:
    """Close the folder ``threads`` keeps open."""
    global _tasks
    if _tasks is not None:
        os.close(_tasks)
        _tasks = None


def restrict(read: Iterable[str] = (), read_dirs: Iterable[str] = (), private: Iterable[str] = (),
             read_trees: Iterable[str] = ()) -> int:
    """Add a Landlock ruleset to this process: from now on it opens nothing but the files ``read``
    (for reading), what is beneath ``read_trees`` (reading), beneath ``read_dirs`` (reading and
    executing: code) and beneath ``private`` (anything), binds and connects no TCP port and
    signals no process outside its domain. Needs one thread (every thread that exists later is
    bound; one that exists now would not be): RuntimeError otherwise. Returns the ABI applied;
    LandlockUnavailable without Landlock."""
    version = abi()
    if version < 1:
        raise LandlockUnavailable(errno.EOPNOTSUPP, "this kernel has no Landlock (Linux >= 5.13 with it enabled)")
    count = threads()
    if count != 1:
        raise RuntimeError(f"Landlock must be applied while the process has one thread; it has {count}")
    handled = sum(bits for since, bits in _FS.items() if since <= version)
    attr = _RulesetAttr(handled, _NET_TCP if version >= 4 else 0, _SCOPES if version >= 6 else 0)
    size = ctypes.sizeof(_RulesetAttr) if version >= 6 else (16 if version >= 4 else 8)
    fd = _syscall(_CREATE, ctypes.byref(attr), ctypes.c_size_t(size), ctypes.c_uint32(0))
    try:
        rules = [(p, _READ_FILE) for p in read] + [(p, _READ_FILE | _READ_DIR) for p in read_trees] \
            + [(p, _READ_FILE | _READ_DIR | _EXECUTE) for p in read_dirs] + [(p, handled) for p in private]
        for path, rights in rules:
            target = os.open(path, os.O_PATH | os.O_CLOEXEC)
            try:
                if not os.path.isdir(path):
                    rights &= _FILE_RIGHTS
                rule = _PathBeneath(rights & handled, target)
                _syscall(_ADD_RULE, ctypes.c_int(fd), ctypes.c_int(_RULE_PATH_BENEATH), ctypes.byref(rule),
                         ctypes.c_uint32(0))
            finally:
                os.close(target)
        _set_no_new_privs()
        _syscall(_RESTRICT, ctypes.c_int(fd), ctypes.c_uint32(0))
    finally:
        os.close(fd)
    return version


def _set_no_new_privs() -> None:
    assert _libc is not None
    if _libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))


# What a query child never needs: every socket (Landlock covers TCP only), io_uring (its requests
# are not system calls the filter sees), other processes' memory, running programs, namespaces,
# mounts, kernel keys and BPF.
_DENIED = ("socket", "socketpair", "io_uring_setup", "io_uring_enter", "io_uring_register", "ptrace",
           "process_vm_readv", "process_vm_writev", "execve", "execveat", "bpf", "perf_event_open",
           "userfaultfd", "unshare", "setns", "mount", "umount2", "pivot_root", "chroot", "add_key",
           "request_key", "keyctl", "kexec_load", "init_module", "finit_module")
_SCMP_ACT_ALLOW = 0x7FFF0000


def no_sockets() -> None:
    """Load a seccomp filter that makes the calls of ``_DENIED`` fail with EPERM, for this thread
    and every thread made later (OSError if libseccomp is missing or the kernel refuses)."""
    name = ctypes.util.find_library("seccomp")
    if name is None:
        raise OSError(errno.ENOENT, "libseccomp is not installed (Debian/Ubuntu: apt-get install libseccomp2)")
    lib = ctypes.CDLL(name, use_errno=True)
    lib.seccomp_init.restype = ctypes.c_void_p
    lib.seccomp_init.argtypes = [ctypes.c_uint32]
    lib.seccomp_syscall_resolve_name.argtypes = [ctypes.c_char_p]
    lib.seccomp_rule_add.argtypes = [ctypes.c_void_p, ctypes.c_uint32, ctypes.c_int, ctypes.c_uint]
    lib.seccomp_load.argtypes = [ctypes.c_void_p]
    lib.seccomp_release.argtypes = [ctypes.c_void_p]
    ctx = lib.seccomp_init(_SCMP_ACT_ALLOW)
    if not ctx:
        raise OSError(errno.ENOMEM, "seccomp_init failed")
    try:
        deny = 0x00050000 | errno.EPERM  # SCMP_ACT_ERRNO(EPERM)
        for call in _DENIED:
            nr = lib.seccomp_syscall_resolve_name(call.encode())
            if nr < 0:  # not a call of this architecture (e.g. no plain socket on some)
                continue
            rc = lib.seccomp_rule_add(ctx, deny, nr, 0)
            if rc < 0:
                raise OSError(-rc, f"seccomp_rule_add({call}): {os.strerror(-rc)}")
        rc = lib.seccomp_load(ctx)
        if rc < 0:
            raise OSError(-rc, f"seccomp_load: {os.strerror(-rc)}")
    finally:
        lib.seccomp_release(ctx)


def limit_memory(max_bytes: int) -> None:
    """Cap this process's data segment (heap and private mappings) at ``max_bytes``: past it,
    allocations fail and the engine reports out of memory (or the child dies, never the server)."""
    resource.setrlimit(resource.RLIMIT_DATA, (max_bytes, max_bytes))
