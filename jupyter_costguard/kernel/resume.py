"""Resume on use, kernel side: the cells the server runs first in a notebook's new kernel
when the notebook has a pending snapshot (issue 44 item 2).

`resume_code(restore, message, names)` wraps a restore cell (`hibernate.restore_code`): if
the restore fails, for any reason, the kernel is *armed*: the next cell the user runs does not
run against the empty namespace; it raises `RuntimeError(message + why)` instead, so its
output says that the variables were not restored and why, before anything ran. The cell after
runs as usual (the user has been told): the kernel transforms a cell more than once, so the
transformer answers for the request it fired for and goes at the next. A restore by hand (the
banner's Restore) before that disarms it: once one of the snapshot's `names` is defined, it
goes without a word. `failed_code(message, names)` arms the kernel at once (the server
refused the snapshot before the kernel loaded anything: a MAC that does not check).

The cells are self-contained (they do not import costguard, which may be what is missing),
bind no name in the user's namespace, and leave silent cells (other tools', the server's own
hibernate calls) alone. Arming is an IPython input transformer.
"""

from __future__ import annotations

from jupyter_costguard.kernel.hibernate.entry import REPLY_PREFIX

#: defines `_arm(message)` in the namespace it is exec'ed in
_ARM = r'''
def _arm(message, names):
    from IPython import get_ipython
    shell = get_ipython()
    if shell is None:
        return

    fired = []

    def _request():
        try:
            return shell.kernel.get_parent()
        except Exception:
            return {}

    def _off():
        try:
            shell.input_transformers_post.remove(costguard_restore_failed)
        except ValueError:
            pass

    def costguard_restore_failed(lines):
        request = _request()
        if (request.get("content") or {}).get("silent") or \
                "".join(lines).lstrip().startswith("__import__('jupyter_costguard"):
            return lines
        if not fired and any(n in shell.user_ns for n in names):  # restored by hand since
            _off()
            return lines
        this = (request.get("header") or {}).get("msg_id") or shell.execution_count
        if fired and fired[0] != this:  # said once (the kernel transforms a cell twice)
            _off()
            return lines
        fired[:] = [this]
        return ["raise RuntimeError(%r)\n" % (message,)]

    shell.input_transformers_post.append(costguard_restore_failed)
'''

_RESUME = _ARM + r'''
try:
    _answer = _restore()
except BaseException as e:
    import json
    _answer = {"error": "%s: %s" % (type(e).__name__, e), "error_type": type(e).__name__}
    print(_prefix + json.dumps(_answer), flush=True)
if not isinstance(_answer, dict) or "error" in _answer:
    _why = _answer.get("error") if isinstance(_answer, dict) else "no answer"
    _arm(_message.replace("{why}", str(_why)), _names)
'''


def resume_code(restore: str, message: str, names: list[str]) -> str:
    """`restore` (a restore cell: one expression statement) run first in a new kernel; if its
    answer is an error the next user cell raises `message`, with `{why}` replaced by the
    error, unless one of `names` (the snapshot's) is defined by then (restored by hand)."""
    expression = restore.strip().rstrip(";")
    return (f"exec({_RESUME!r}, {{'_restore': lambda: {expression}, "
            f"'_message': {message!r}, '_prefix': {REPLY_PREFIX!r}, "
            f"'_names': {_names(names)!r}}})")


def failed_code(message: str, names: list[str]) -> str:
    """Arm the kernel: its next user cell raises `message` instead of running (unless one of
    `names` is defined by then)."""
    return (f"exec({_ARM + '_arm(_message, _names)'!r}, {{'_message': {message!r}, "
            f"'_names': {_names(names)!r}}})")


def _names(names: list[str]) -> list[str]:
    """The names the kernel looks for: plain identifiers only (they are written into code)."""
    return [str(n) for n in names if str(n).isidentifier()][:200]
