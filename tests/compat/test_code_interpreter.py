"""E2B's code-interpreter SDK (`e2b-code-interpreter`) against Stockade,
unchanged: configured like E2B's own SDK in test_e2b.py (E2B_API_URL =
E2B_SANDBOX_URL = http://HOST:PORT/e2b, a Stockade token as E2B_API_KEY),
sandboxes made with the SDK's default template `code-interpreter-v1`, which
Stockade runs as its preset of that name (the image
stockade-code-interpreter:latest, scripts/build-image code-interpreter).
The SDK sends its calls to `/e2b/execute`, `/e2b/contexts`… with
`E2b-Sandbox-Port: 49999`; Stockade hands them to the sandbox's agent, which
runs the code in Jupyter kernels. One sandbox serves most tests."""

import asyncio
import time

import httpx
import pytest

from e2b_code_interpreter import (
    AsyncSandbox,
    Context,
    Execution,
    NotFoundException,
    Sandbox,
    SandboxException,
    TimeoutException,
)
from e2b_code_interpreter.charts import BarChart, ChartType, LineChart

pytestmark = pytest.mark.usefixtures("e2b_env")

DEFAULT_TEMPLATE = "code-interpreter-v1"


@pytest.fixture(scope="module")
def sandbox(e2b_env, code_interpreter_image, run_id):
    """One sandbox of the SDK's default template most tests share, with a
    sandbox-wide environment variable; killed at the end, also on failure."""
    assert Sandbox.default_template == DEFAULT_TEMPLATE
    sb = Sandbox.create(
        envs={"A": "1"},
        timeout=900,
        metadata={"suite": run_id, "role": "code-interpreter"},
    )
    try:
        yield sb
    finally:
        sb.kill()


# --- the sandbox and its default template -------------------------------------------


def test_default_template_is_the_code_interpreter(sandbox):
    info = sandbox.get_info()
    assert info.template_id == DEFAULT_TEMPLATE
    assert sandbox.is_running()
    # The SDK sends the code-interpreter calls with the sandbox's tokens.
    assert sandbox._envd_access_token and sandbox.traffic_access_token


# --- run_code -------------------------------------------------------------------------


def test_state_is_kept_across_cells(sandbox):
    first = sandbox.run_code("x = 1")
    assert first.error is None, first.error
    assert first.results == [] and first.text is None
    second = sandbox.run_code("x + 1")
    assert second.error is None, second.error
    assert second.text == "2"
    assert len(second.results) == 1 and second.results[0].is_main_result


def test_cells_are_counted(sandbox):
    first = sandbox.run_code("counted = 1")
    second = sandbox.run_code("counted + 1")
    assert first.execution_count is not None, "no number_of_executions line"
    assert second.execution_count == first.execution_count + 1


def test_print_goes_to_the_logs(sandbox):
    ex = sandbox.run_code('print("hello from python")\nimport sys\nprint("to stderr", file=sys.stderr)')
    assert ex.error is None, ex.error
    assert "".join(ex.logs.stdout) == "hello from python\n"
    assert "".join(ex.logs.stderr) == "to stderr\n"
    assert ex.text is None


def test_callbacks_come_in_order_as_the_cell_runs(sandbox):
    events = []
    first_stdout = []

    def on_stdout(msg):
        first_stdout.append(time.monotonic())
        events.append(("stdout", msg.line))

    code = "\n".join(
        [
            "import sys, time",
            'print("out-1", flush=True)',
            "time.sleep(1.5)",
            'print("err-1", file=sys.stderr, flush=True)',
            "time.sleep(0.3)",
            "display(42)",
            "time.sleep(0.3)",
            "1/0",
        ]
    )
    ex = sandbox.run_code(
        code,
        on_stdout=on_stdout,
        on_stderr=lambda m: events.append(("stderr", m.line)),
        on_result=lambda r: events.append(("result", r.text)),
        on_error=lambda e: events.append(("error", e.name)),
    )
    done = time.monotonic()
    assert events == [
        ("stdout", "out-1\n"),
        ("stderr", "err-1\n"),
        ("result", "42"),
        ("error", "ZeroDivisionError"),
    ], events
    # Streamed: the first line came well before the cell ended.
    assert done - first_stdout[0] > 1.0, done - first_stdout[0]
    # A display is not the cell's main result, and the error ended the cell.
    assert len(ex.results) == 1 and not ex.results[0].is_main_result
    assert ex.text is None
    assert ex.error is not None and ex.error.name == "ZeroDivisionError"


def test_an_error_names_the_exception(sandbox):
    sandbox.run_code("before_error = 7")
    ex = sandbox.run_code("1/0")
    assert ex.error is not None
    assert ex.error.name == "ZeroDivisionError"
    assert ex.error.value == "division by zero"
    assert "ZeroDivisionError" in ex.error.traceback
    assert ex.results == []
    # The context goes on after an error, its state kept.
    assert sandbox.run_code("before_error").text == "7"


def test_a_matplotlib_line_plot_is_a_png_and_a_line_chart(sandbox):
    code = """
import matplotlib.pyplot as plt
import numpy as np

xs = np.linspace(0, 10, 50)
plt.figure()
plt.plot(xs, np.sin(xs), label="sin")
plt.title("Sine wave")
plt.xlabel("x")
plt.ylabel("sin(x)")
plt.legend()
plt.show()
"""
    ex = sandbox.run_code(code)
    assert ex.error is None, ex.error
    plots = [r for r in ex.results if r.png]
    assert len(plots) == 1, ex.results
    plot = plots[0]
    assert not plot.is_main_result
    # base64 of a PNG file starts with the PNG signature's encoding.
    assert plot.png.startswith("iVBORw0KGgo"), plot.png[:20]
    chart = plot.chart
    assert isinstance(chart, LineChart), (type(chart), plot.formats())
    assert chart.type == ChartType.LINE
    assert chart.title == "Sine wave"
    assert chart.x_label == "x" and chart.y_label == "sin(x)"
    assert [e.label for e in chart.elements] == ["sin"]
    assert len(chart.elements[0].points) == 50


def test_a_bar_chart(sandbox):
    code = """
import matplotlib.pyplot as plt

plt.figure()
plt.bar(["apples", "pears", "plums"], [3, 5, 2])
plt.title("Fruit")
plt.show()
"""
    ex = sandbox.run_code(code)
    assert ex.error is None, ex.error
    charts = [r.chart for r in ex.results if r.chart is not None]
    assert len(charts) == 1, [r.formats() for r in ex.results]
    chart = charts[0]
    assert isinstance(chart, BarChart), type(chart)
    assert chart.type == ChartType.BAR and chart.title == "Fruit"
    bars = {e.label: float(e.value) for e in chart.elements}
    assert bars == {"apples": 3.0, "pears": 5.0, "plums": 2.0}, bars


def test_a_dataframe_is_html_and_data(sandbox):
    ex = sandbox.run_code('import pandas as pd\npd.DataFrame({"a": [1, 2], "b": ["x", "y"]})')
    assert ex.error is None, ex.error
    main = [r for r in ex.results if r.is_main_result]
    assert len(main) == 1, ex.results
    frame = main[0]
    assert "<table" in frame.html
    assert frame.text and "a" in frame.text
    assert frame.data is not None, frame.formats()
    assert frame.data == {"a": [1, 2], "b": ["x", "y"]}, frame.data


# --- contexts ---------------------------------------------------------------------------


def test_contexts_create_list_restart_remove(sandbox):
    sandbox.run_code("default_only = 3")
    ctx = sandbox.create_code_context(language="python", cwd="/tmp")
    assert isinstance(ctx, Context)
    assert ctx.id and ctx.language == "python" and ctx.cwd == "/tmp"
    try:
        assert sandbox.run_code("import os; os.getcwd()", context=ctx).text == "/tmp"
        # Its own state: the default context's variables are not there.
        assert sandbox.run_code("default_only", context=ctx).error.name == "NameError"
        sandbox.run_code("z = 5", context=ctx)
        assert sandbox.run_code("z", context=ctx).text == "5"
        assert sandbox.run_code("z").error.name == "NameError"

        listed = sandbox.list_code_contexts()
        assert ctx.id in [c.id for c in listed]
        mine = next(c for c in listed if c.id == ctx.id)
        assert mine.language == "python" and mine.cwd == "/tmp"

        sandbox.restart_code_context(ctx)
        after = sandbox.run_code("z", context=ctx)
        assert after.error is not None and after.error.name == "NameError", after
        # Same id, same working directory after the restart.
        assert sandbox.run_code("import os; os.getcwd()", context=ctx).text == "/tmp"
    finally:
        sandbox.remove_code_context(ctx)
    assert ctx.id not in [c.id for c in sandbox.list_code_contexts()]
    with pytest.raises(NotFoundException):
        sandbox.run_code("1", context=ctx)
    # The default context was not touched by any of it.
    assert sandbox.run_code("default_only").text == "3"


def test_a_context_defaults_to_python_in_the_home_directory(sandbox):
    ctx = sandbox.create_code_context()
    try:
        assert ctx.language == "python"
        assert ctx.cwd == "/home/user"
        assert sandbox.run_code("import os; os.getcwd()", context=ctx).text == "/home/user"
        # The default context starts there too.
        assert sandbox.run_code("import os; os.getcwd()").text == "/home/user"
    finally:
        sandbox.remove_code_context(ctx.id)


def test_a_context_in_a_directory_that_is_not_there_is_refused(sandbox):
    with pytest.raises(SandboxException) as err:
        sandbox.create_code_context(cwd="/no/such/dir")
    assert "cwd" in str(err.value), str(err.value)


# --- languages -------------------------------------------------------------------------------


def test_javascript_output(sandbox):
    out = sandbox.run_code('console.log("hi")', language="javascript")
    assert out.error is None, out.error
    assert "".join(out.logs.stdout) == "hi\n"
    both = sandbox.run_code('console.log("and"); "a result"', language="javascript")
    assert "".join(both.logs.stdout) == "and\n"
    assert both.text == "a result"


def test_javascript_results_and_state(sandbox):
    two = sandbox.run_code("1+1", language="javascript")
    assert two.error is None, two.error
    assert two.text == "2"
    # The javascript context keeps its state too, apart from Python's.
    sandbox.run_code("var jsValue = 40", language="javascript")
    assert sandbox.run_code("jsValue + 2", language="javascript").text == "42"
    err = sandbox.run_code("throw new Error('boom')", language="javascript")
    assert err.error is not None and "boom" in err.error.value, err.error


def test_bash(sandbox):
    home = sandbox.commands.run("echo $HOME").stdout
    out = sandbox.run_code("echo $HOME", language="bash")
    assert out.error is None, out.error
    # The kernel runs as the sandbox's user, like commands do.
    assert "".join(out.logs.stdout) == home
    sandbox.run_code("BASH_STATE=kept", language="bash")
    assert "".join(sandbox.run_code("echo $BASH_STATE", language="bash").logs.stdout) == "kept\n"


def test_a_language_without_a_kernel_is_a_clear_error(sandbox):
    with pytest.raises(SandboxException) as err:
        sandbox.run_code("1", language="r")
    text = str(err.value)
    assert "'r'" in text and "kernel" in text, text


# --- timeouts ----------------------------------------------------------------------------------


def test_a_timed_out_cell_is_interrupted_and_the_context_answers_next(sandbox):
    sandbox.run_code("kept_across_timeout = 41")
    start = time.monotonic()
    with pytest.raises(TimeoutException):
        sandbox.run_code("import time; time.sleep(30)", timeout=2)
    assert time.monotonic() - start < 10
    start = time.monotonic()
    ex = sandbox.run_code("1")
    took = time.monotonic() - start
    assert ex.error is None and ex.text == "1", ex
    # Interrupted, not left sleeping: the next cell did not wait for it.
    assert took < 10, took
    assert sandbox.run_code("kept_across_timeout + 1").text == "42"


# --- environment variables ------------------------------------------------------------------------


def test_environment_variables(sandbox):
    assert sandbox.run_code("import os; str(os.environ.get('A'))").text == "1"
    one_run = sandbox.run_code("import os; str(os.environ.get('B'))", envs={"B": "2"})
    assert one_run.text == "2"
    assert sandbox.run_code("import os; str(os.environ.get('B'))").text == "None"
    # A run's value of a sandbox-wide variable lasts for that run only.
    assert sandbox.run_code("import os; os.environ['A']", envs={"A": "over"}).text == "over"
    assert sandbox.run_code("import os; os.environ['A']").text == "1"
    # Values reach the kernel as they are, quotes and all.
    tricky = "it's \"quoted\"\nand \\ more"
    got = sandbox.run_code("import os; print(os.environ['T'], end='')", envs={"T": tricky})
    assert "".join(got.logs.stdout) == tricky
    js = sandbox.run_code("console.log(process.env.A)", language="javascript", envs={"A": "js-run"})
    assert "".join(js.logs.stdout) == "js-run\n"
    sh = sandbox.run_code("echo $B", language="bash", envs={"B": "bash-run"})
    assert "".join(sh.logs.stdout) == "bash-run\n"
    assert "".join(sandbox.run_code("echo \"[$B]\"", language="bash").logs.stdout) == "[]\n"


# --- who may call port 49999 ------------------------------------------------------------------------


def test_only_the_sandbox_credentials_reach_the_code_interpreter(sandbox, e2b_env):
    url = f"{e2b_env.base}/e2b/contexts"
    base = {"E2b-Sandbox-Id": sandbox.sandbox_id, "E2b-Sandbox-Port": "49999"}
    ok = httpx.get(url, headers={**base, "E2B-Traffic-Access-Token": sandbox.traffic_access_token})
    assert ok.status_code == 200, ok.text
    assert isinstance(ok.json(), list)
    assert httpx.get(url, headers={**base, "X-Access-Token": sandbox._envd_access_token}).status_code == 200
    assert httpx.get(url, headers={**base, "X-API-Key": e2b_env.tokens["tenant-a"]}).status_code == 200
    # Nothing, a wrong token, another account's key: refused.
    assert httpx.get(url, headers=base).status_code == 401
    assert httpx.get(url, headers={**base, "E2B-Traffic-Access-Token": "stkt_wrong"}).status_code in (401, 403)
    other = httpx.get(url, headers={**base, "X-API-Key": e2b_env.tokens["tenant-b"]})
    assert other.status_code in (403, 404), other.text
    # The host form reaches the same server.
    host = sandbox.get_host(49999)
    r = httpx.get(
        f"http://127.0.0.1:{e2b_env.port}/health",
        headers={"Host": host, "E2B-Traffic-Access-Token": sandbox.traffic_access_token},
    )
    assert r.status_code == 200 and r.json() == "OK", r.text
    assert httpx.get(f"http://127.0.0.1:{e2b_env.port}/health", headers={"Host": host}).status_code == 401


# --- the async SDK -------------------------------------------------------------------------------------


def test_the_async_sdk(sandbox):
    sandbox.run_code("async_base = 1")

    async def scenario():
        asb = await AsyncSandbox.connect(sandbox.sandbox_id, timeout=900)
        seen = []

        async def on_stdout(msg):
            seen.append(msg.line)

        ex = await asb.run_code('print("async hello")\nasync_base + 10', on_stdout=on_stdout)
        ctx = await asb.create_code_context(cwd="/tmp")
        try:
            in_ctx = await asb.run_code("import os; os.getcwd()", context=ctx)
        finally:
            await asb.remove_code_context(ctx)
        return ex, seen, in_ctx

    ex, seen, in_ctx = asyncio.run(scenario())
    assert isinstance(ex, Execution)
    assert seen == ["async hello\n"]
    assert ex.text == "11"
    assert in_ctx.text == "/tmp"
