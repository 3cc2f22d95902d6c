"""Public import path: ``from jupyter_costguard import checkpoint``.

The code runs in the user's (or a job's) kernel and lives in the `kernel/checkpoint` package;
this module *is* that package (one module object under both names, so its state is not
duplicated).
"""

import sys

from jupyter_costguard.kernel import checkpoint as _impl

sys.modules[__name__] = _impl
