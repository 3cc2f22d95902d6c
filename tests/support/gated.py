"""A value whose loading waits for a file (a test's gate), so a restore is held open while a
test looks at it and sends a cell. Kernel code: `GATED.format(gate=PATH)` defines `gated`
(42 once loaded); the restore of a snapshot holding it ends only once PATH exists."""

GATED = """
import os, time
def wait_gate(path, value):
    deadline = time.monotonic() + 120
    while not os.path.exists(path) and time.monotonic() < deadline:
        time.sleep(0.02)
    return value
class Gated:
    def __init__(self, path, value):
        self.path, self.value = path, value
    def __reduce__(self):
        return (wait_gate, (self.path, self.value))
gated = Gated({gate!r}, 42)
"""
