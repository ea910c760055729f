"""Starts each kernel of the image the way a Jupyter client does and checks
what its cells produce: the Python kernel's inline figures, e2b/chart,
e2b/data, text/html and application/json outputs, and that the Deno and
bash kernels run code. Exits non-zero with a message naming what failed."""

import queue
import re
import sys

from jupyter_client.manager import start_new_kernel

failures = []


def check(ok, what):
    if not ok:
        failures.append(what)


def brief(value):
    """A short repr for a message: outputs hold images as base64."""
    text = repr(value)
    return text if len(text) <= 300 else text[:300] + "…"


def plain_text(text):
    """Text without ANSI colour codes (Deno colours its results)."""
    return re.sub(r"\x1b\[[0-9;]*m", "", text)


def run(kc, code):
    """The outputs of one cell: (msg_type, content) pairs, and its reply."""
    outputs = []

    def hook(msg):
        kind = msg["header"]["msg_type"]
        if kind in ("stream", "display_data", "execute_result", "error"):
            outputs.append((kind, msg["content"]))

    reply = kc.execute_interactive(code, output_hook=hook, timeout=120)
    # Deno's kernel at times sends a cell's stdout after its idle status:
    # what comes for this cell within a second more counts too.
    cell = reply["parent_header"].get("msg_id")
    while True:
        try:
            msg = kc.get_iopub_msg(timeout=1)
        except queue.Empty:
            break
        if msg["parent_header"].get("msg_id") == cell:
            hook(msg)
    return outputs, reply["content"]


def bundles(outputs, kind=None):
    return [c["data"] for k, c in outputs if k in ("display_data", "execute_result") and (kind is None or k == kind)]


def stdout(outputs):
    return "".join(c["text"] for k, c in outputs if k == "stream" and c["name"] == "stdout")


def errors(outputs):
    return [f'{c["ename"]}: {c["evalue"]}' for k, c in outputs if k == "error"]


def with_kernel(name, body):
    try:
        km, kc = start_new_kernel(kernel_name=name, startup_timeout=120)
    except Exception as e:  # the message is the check's result
        failures.append(f"the {name} kernel did not start: {e!r}")
        return
    try:
        body(kc)
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)


def chart_type(kc, code):
    out, _ = run(kc, code)
    shown = [b for b in bundles(out, "display_data") if "e2b/chart" in b]
    if not shown:
        return f"no e2b/chart display ({brief(errors(out) or out)})"
    check("image/png" in shown[0], f"no image/png beside e2b/chart for: {code!r}")
    return shown[0]["e2b/chart"].get("type")


def python(kc):
    out, _ = run(kc, "import sys\nprint(sorted(m for m in ('pandas', 'matplotlib') if m in sys.modules))")
    check(stdout(out).strip() == "[]", f"pandas or matplotlib imported at kernel start: {stdout(out)!r}")
    out, _ = run(kc, "print(sorted(n for n in dir() if 'stockade' in n))")
    check(stdout(out).strip() == "[]", f"the startup file left names behind: {stdout(out)!r}")

    setup = "import matplotlib.pyplot as plt\n"
    kinds = {
        "line": setup + "plt.plot([1, 2, 3], [1, 4, 9])\nplt.title('t')\nplt.show()",
        "bar": setup + "plt.bar(['a', 'b', 'c'], [3, 1, 2])\nplt.show()",
        "scatter": setup + "plt.scatter([1, 2, 3], [3, 1, 2])\nplt.show()",
        "pie": setup + "plt.pie([1, 2, 3], labels=['a', 'b', 'c'])\nplt.show()",
    }
    for want, code in kinds.items():
        got = chart_type(kc, code)
        check(got == want, f"e2b/chart type of a {want} plot: {got!r}")

    out, _ = run(kc, "fig, ax = plt.subplots()\nax.plot([0, 1], [1, 0])\nfig")
    result = bundles(out, "execute_result")
    check(
        bool(result) and "image/png" in result[0] and result[0].get("e2b/chart", {}).get("type") == "line",
        f"a Figure as the last expression: {brief([sorted(b) for b in result] or errors(out))}",
    )

    out, _ = run(
        kc,
        "import pandas as pd\n"
        "pd.DataFrame({'a': [1, 2], 't': pd.to_datetime(['2024-01-01 00:00:00', '2024-01-02 03:04:05']),"
        " 'x': [1.5, float('nan')], 's': ['p', 'q']})",
    )
    result = bundles(out, "execute_result")
    want = {
        "a": [1, 2],
        "t": ["2024-01-01T00:00:00", "2024-01-02T03:04:05"],
        "x": [1.5, None],
        "s": ["p", "q"],
    }
    check(bool(result) and result[0].get("e2b/data") == want, f"e2b/data of a DataFrame: {brief([b.get('e2b/data') for b in result] or errors(out))}")
    check(bool(result) and "<table" in result[0].get("text/html", ""), "no text/html table for a DataFrame")

    out, _ = run(kc, "{'k': [1, 2.5, None], 'n': {'m': 'v'}}")
    result = bundles(out, "execute_result")
    check(
        bool(result) and result[0].get("application/json") == {"k": [1, 2.5, None], "n": {"m": "v"}},
        f"application/json of a dict: {brief(result or errors(out))}",
    )

    out, _ = run(kc, "1 / 0")
    check(any(e.startswith("ZeroDivisionError") for e in errors(out)), f"no ZeroDivisionError: {brief(out)}")

    # The session's history lives in memory only: In, Out and %history work,
    # and no cell is written to a history database.
    run(kc, "x_hist = 41")
    run(kc, "x_hist + 1")
    out, _ = run(
        kc,
        "from IPython import get_ipython\n"
        "h = get_ipython().history_manager\n"
        "print(In[-3], Out[len(In) - 2], h.enabled, type(h.db).__name__)",
    )
    check(
        stdout(out).strip() == "x_hist = 41 42 False DummyDB",
        f"in-memory history: {stdout(out)!r} {brief(errors(out))}",
    )


def deno(kc):
    out, _ = run(kc, "console.log(1 + 1)")
    check(stdout(out).strip() == "2", f"deno: console.log(1 + 1) printed {stdout(out)!r} {brief(errors(out))}")
    out, _ = run(kc, "const xs: number[] = [1, 2]; xs.map((x) => x * 3)")
    result = bundles(out, "execute_result")
    check(
        bool(result) and plain_text(result[0].get("text/plain", "")) == "[ 3, 6 ]",
        f"deno: a TypeScript expression gave {brief(out)}",
    )


def bash(kc):
    out, _ = run(kc, "echo hello from $(whoami)")
    check(stdout(out).strip().startswith("hello from "), f"bash: echo printed {stdout(out)!r}")


with_kernel("python3", python)
with_kernel("deno", deno)
with_kernel("bash", bash)

if failures:
    for f in failures:
        print(f"kernel check failed: {f}", file=sys.stderr)
    sys.exit(1)
print("kernels: python3, deno and bash run code; e2b/chart, e2b/data, text/html and application/json outputs are there")
