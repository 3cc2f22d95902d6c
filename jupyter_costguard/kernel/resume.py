"""Resume on use, kernel side: the cells the server runs first in a notebook's new kernel
when the notebook has a pending snapshot (issue 44 item 2).

`resume_code(restore, message)` wraps a restore cell (`hibernate.restore_code`): if the
restore fails, for any reason, the kernel is *armed*: the next cell the user runs does not run
against the empty namespace; it raises `RuntimeError(message + why)` instead, so its output
says that the variables were not restored and why, before anything ran. The cell after runs
as usual (the user has been told). `failed_code(message)` arms the kernel at once (the server
refused the snapshot before the kernel loaded anything: a MAC that does not check).

The cells are self-contained (they do not import costguard, which may be what is missing),
bind no name in the user's namespace, and leave silent cells (other tools', the server's own
hibernate calls) alone. Arming is an IPython input transformer.
"""

from __future__ import annotations

from jupyter_costguard.kernel.hibernate.entry import REPLY_PREFIX

#: defines `_arm(message)` in the namespace it is exec'ed in
_ARM = r'''
def _arm(message):
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

    def costguard_restore_failed(lines):
        request = _request()
        if (request.get("content") or {}).get("silent") or \
                "".join(lines).lstrip().startswith("__import__('jupyter_costguard"):
            return lines
        this = (request.get("header") or {}).get("msg_id") or shell.execution_count
        if fired and fired[0] != this:  # said once (the kernel transforms a cell twice)
            try:
                shell.input_transformers_post.remove(costguard_restore_failed)
            except ValueError:
                pass
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
    _arm(_message.replace("{why}", str(_why)))
'''


def resume_code(restore: str, message: str) -> str:
    """`restore` (a restore cell: one expression statement) run first in a new kernel; if its
    answer is an error the next user cell raises `message`, with `{why}` replaced by the
    error."""
    expression = restore.strip().rstrip(";")
    return (f"exec({_RESUME!r}, {{'_restore': lambda: {expression}, "
            f"'_message': {message!r}, '_prefix': {REPLY_PREFIX!r}}})")


def failed_code(message: str) -> str:
    """Arm the kernel: its next user cell raises `message` instead of running."""
    return f"exec({_ARM + '_arm(_message)'!r}, {{'_message': {message!r}}})"
