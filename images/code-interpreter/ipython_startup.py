"""Display formatters of Stockade's code-interpreter image.

Every Python kernel runs this file at start (see ipython_kernel_config.py).
It adds the rich outputs E2B's code-interpreter SDKs read:

- ``e2b/data``: a pandas DataFrame as a dict of column lists
  (``DataFrame.to_dict(orient="list")``), timestamps as ISO 8601 strings and
  missing values (NaN, NaT, NA) as null; frames of more than a million cells
  get none (their JSON would pass the output a cell may write);
- ``e2b/chart``: a matplotlib Figure as ``e2b_charts.chart_figure_to_dict``
  describes it (``{}`` when that fails);
- ``application/json``: lists and dicts that JSON can hold.

pandas and matplotlib are never imported here: a formatter looks its class
up in ``sys.modules``, where it is only once the user imported the library,
so a kernel starts as fast as without them. The file runs in the
user's namespace, so everything lives in one function that is deleted after
the call.
"""


def _stockade_register_formatters():
    import math
    import sys

    import orjson
    from IPython import get_ipython
    from IPython.core.formatters import BaseFormatter
    from traitlets import Unicode

    max_data_cells = 1_000_000
    shell = get_ipython()
    if shell is None:
        return
    formatters = shell.display_formatter.formatters

    class TypeFormatter(BaseFormatter):
        """Formats the instances of one class, named by module and class name,
        with ``convert``; other objects as BaseFormatter does.

        The class is looked up in ``sys.modules`` at each call, so its module
        is never imported here. IPython's own registry by type name is not
        used: matplotlib's inline backend drops every formatter registered
        for Figure when it starts."""

        module = Unicode()
        name = Unicode()
        _return_type = (dict,)

        def __init__(self, convert, **kwargs):
            super().__init__(**kwargs)
            self.convert = convert

        def __call__(self, obj):
            if self.enabled:
                cls = getattr(sys.modules.get(self.module), self.name, None)
                if isinstance(cls, type) and isinstance(obj, cls):
                    try:
                        return self.convert(obj)
                    except Exception:  # the object still displays without it
                        return None
            return super().__call__(obj)

    json_options = orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_NON_STR_KEYS

    def plain(value):
        """A JSON value for what orjson does not know: timestamps as ISO
        strings, missing times as null, numpy and other scalars as Python
        numbers, anything else as its str()."""
        if type(value).__name__ in ("NaTType", "NAType"):
            return None
        isoformat = getattr(value, "isoformat", None)
        if callable(isoformat):
            return isoformat()
        item = getattr(value, "item", None)
        if callable(item):
            try:
                value = item()
            except (TypeError, ValueError):
                return str(value)
            if isinstance(value, float) and not math.isfinite(value):
                return None
            if isinstance(value, (bool, int, float, str)) or value is None:
                return value
            return plain(value)
        return str(value)

    def to_json(value, default=None):
        """``value`` made of JSON types only (NaN becomes null), or None when
        it cannot be. With ``default``, datetimes go through it too."""
        options = json_options
        if default is not None:
            options |= orjson.OPT_PASSTHROUGH_DATETIME
        try:
            return orjson.loads(orjson.dumps(value, default=default, option=options))
        except (TypeError, ValueError, orjson.JSONEncodeError):
            return None

    def frame_data(frame):
        rows, columns = frame.shape
        if rows * columns > max_data_cells:
            return None
        return to_json(frame.to_dict(orient="list"), default=plain)

    def figure_chart(figure):
        try:
            from e2b_charts import chart_figure_to_dict

            chart = to_json(chart_figure_to_dict(figure), default=plain)
        except Exception:  # a figure e2b_charts cannot read still displays
            return {}
        return chart if isinstance(chart, dict) else {}

    def json_value(value):
        return to_json(value)

    parent = shell.display_formatter
    formatters["e2b/data"] = TypeFormatter(
        frame_data,
        parent=parent,
        format_type="e2b/data",
        print_method="_repr_e2b_data_",
        module="pandas",
        name="DataFrame",
    )
    formatters["e2b/chart"] = TypeFormatter(
        figure_chart,
        parent=parent,
        format_type="e2b/chart",
        print_method="_repr_e2b_chart_",
        module="matplotlib.figure",
        name="Figure",
    )
    formatters["application/json"].for_type(dict, json_value)
    formatters["application/json"].for_type(list, json_value)


_stockade_register_formatters()
del _stockade_register_formatters
