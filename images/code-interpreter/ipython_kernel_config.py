# IPython kernel configuration for every user of Stockade's code-interpreter
# image. IPython reads it from /etc/ipython (a system config directory), so
# no per-user profile is needed.

import os

c = get_config()  # noqa: F821 (defined by IPython when it loads this file)

# Figures show inline: plt.show(), and a Figure as a cell's last expression,
# produce image/png. ipykernel picks this backend when MPLBACKEND is unset;
# saying it here keeps it so for any ipykernel. A backend the sandbox's
# environment names wins.
os.environ.setdefault("MPLBACKEND", "module://matplotlib_inline.backend_inline")

# The display formatters for e2b/data, e2b/chart and application/json.
c.InteractiveShellApp.exec_files = ["/usr/local/share/stockade/ipython_startup.py"]

# No history database: IPython would write every cell to a SQLite file in
# ~/.ipython, which costs half of a small cell's round trip, and a sandbox's
# kernel has no later session to recall it in. In, Out, _ and %history of
# the running kernel work as before.
c.HistoryManager.enabled = False
