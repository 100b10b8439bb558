"""The sandbox stage's parts, run by `sandbox/enter.py` in a fresh interpreter (`python -I -S`).

They import only the standard library's C-backed modules and each other (relatively), so the stage
starts fast and never loads the `sandbox` package; the package may import them too (tests do).

    calls   libc calls the stage needs (mount, pivot_root, unshare, setns, prctl) and StepFailed
    world   the run's file system: the real one read-only under throwaway layers, and what was written there
    guard   what the command may not do: seccomp filter, no_new_privs, capabilities
    watch   what the run did that a real run would have done differently (network counters)
"""
