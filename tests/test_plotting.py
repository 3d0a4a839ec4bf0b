"""The book's plotly renderer and slider helper (dpclip_lab.plotting)."""
import json
import re

import numpy as np
import plotly.graph_objects as go
import plotly.io as pio
import pytest
import torch

from dpclip_lab import plotting as dp

PLOTLY_MIME = "application/vnd.plotly.v1+json"


def _frames(values):
    return {v: [go.Scatter(x=[0, 1, 2], y=[0, v, 2 * v], name="line")] for v in values}


def test_renderer_is_default_and_emits_both_mimetypes(monkeypatch):
    monkeypatch.delenv(dp.HTML_ONLY_ENV, raising=False)
    assert pio.renderers.default == dp.RENDERER_NAME
    fig = go.Figure(go.Scatter(x=[1, 2], y=[3, 4]))
    bundle = pio.renderers._build_mime_bundle(fig.to_dict())
    assert set(bundle) == {PLOTLY_MIME, "text/html"}
    html = bundle["text/html"]
    assert "Plotly.newPlot" in html
    assert "<script src" not in html  # plotly.js is served once by the book, not inlined
    assert "cdn" not in html.lower()
    assert "MathJax.Hub.Config" not in html
    json.dumps(bundle[PLOTLY_MIME])  # JSON-serializable for the notebook


def test_repr_mimebundle_uses_the_book_renderer(monkeypatch):
    monkeypatch.delenv(dp.HTML_ONLY_ENV, raising=False)
    bundle = go.Figure(go.Bar(y=[1, 2]))._repr_mimebundle_()
    assert "text/html" in bundle and PLOTLY_MIME in bundle


def test_html_only_during_the_book_build(monkeypatch):
    monkeypatch.setenv(dp.HTML_ONLY_ENV, "1")
    bundle = dp.BookRenderer().to_mimebundle(go.Figure().to_dict())
    assert set(bundle) == {"text/html"}


def test_div_ids_are_deterministic_per_content():
    r = dp.BookRenderer()
    a = r.to_mimebundle(go.Figure(go.Scatter(y=[1])).to_dict())["text/html"]
    b = r.to_mimebundle(go.Figure(go.Scatter(y=[2])).to_dict())["text/html"]
    assert a != b and "dpclip-fig-" in a


def test_animation_does_not_autoplay(monkeypatch):
    monkeypatch.delenv(dp.HTML_ONLY_ENV, raising=False)
    fig = dp.slider_figure(_frames([1.0, 2.0]), slider_label="C")
    html = dp.BookRenderer().to_mimebundle(fig.to_dict())["text/html"]
    assert "Plotly.animate" not in html


@pytest.mark.parametrize("values", [[0.5], [0.1, 1.0, 10.0], list(range(25))])
def test_slider_has_one_step_per_frame(values):
    fig = dp.slider_figure(_frames(values), slider_label="clip norm C")
    assert len(fig.frames) == len(values)
    (slider,) = fig.layout.sliders
    assert len(slider.steps) == len(values)
    assert [s.args[0][0] for s in slider.steps] == [f.name for f in fig.frames]
    assert all(s.method == "animate" for s in slider.steps)
    assert slider.currentvalue.prefix == "clip norm C = "
    assert not fig.layout.updatemenus  # no play button


def test_slider_axes_cover_every_frame():
    fig = dp.slider_figure(_frames([1.0, 5.0]), slider_label="C")
    lo, hi = fig.layout.yaxis.range
    assert lo <= 0 and hi >= 10
    assert fig.layout.yaxis.autorange is False


def test_slider_static_traces_are_not_repeated():
    static = [go.Scatter(x=[0, 1], y=[0, 1], name="static")]
    fig = dp.slider_figure(_frames([1.0, 2.0, 3.0]), slider_label="C", static=static, active=2)
    assert len(fig.data) == 2 and fig.data[0].name == "static"
    assert list(fig.data[1].y) == [0, 3, 6]
    assert all(tuple(f.traces) == (1,) and len(f.data) == 1 for f in fig.frames)
    assert fig.layout.sliders[0].active == 2


def test_slider_rejects_bad_frames():
    with pytest.raises(ValueError, match="same"):
        dp.slider_figure({1: [go.Scatter()], 2: [go.Scatter(), go.Scatter()]}, slider_label="C")
    with pytest.raises(ValueError, match="non-empty"):
        dp.slider_figure({}, slider_label="C")
    with pytest.raises(ValueError, match="distinct"):
        dp.slider_figure(_frames([1.0001, 1.0002]), slider_label="C")
    with pytest.raises(ValueError, match="active"):
        dp.slider_figure(_frames([1.0]), slider_label="C", active=3)


def test_live_builds_controls_and_output():
    ipywidgets = pytest.importorskip("ipywidgets")
    box = dp.live(lambda c: go.Figure(go.Scatter(y=[0, c])),
                  c=ipywidgets.FloatSlider(value=1.0, min=0.1, max=2.0))
    kinds = [type(w).__name__ for w in box.children]
    assert kinds == ["HTML", "FloatSlider", "Output"]
    assert box.children[1].continuous_update is False


def test_plane_basis_is_orthonormal_and_starts_with_direction():
    torch.manual_seed(0)
    G = torch.randn(50, 6, dtype=torch.float64)
    d = G.mean(0)
    B = dp.plane_basis(G, d)
    assert torch.allclose(B @ B.T, torch.eye(2, dtype=torch.float64), atol=1e-12)
    assert torch.allclose(B[0], d / d.norm())


def test_clipped_cloud_points_lie_inside_the_circle():
    torch.manual_seed(1)
    G = torch.randn(40, 5, dtype=torch.float64) * 3
    B = dp.plane_basis(G, G.mean(0))
    pts, circle, arrow = dp.clipped_cloud(G, 1.0, B)
    r = np.hypot(np.asarray(pts.x, dtype=float), np.asarray(pts.y, dtype=float))
    assert r.max() <= 1.0 + 1e-5
    assert "%" in pts.name


def test_slider_log_axis_range_is_in_log_units_and_explicit_ranges_win():
    frames = {c: [go.Scatter(x=[1e-4, c], y=[0.0, 1.0])] for c in (0.01, 1.0)}
    fig = dp.slider_figure(frames, slider_label="C",
                           layout=dict(xaxis=dict(type="log"), yaxis=dict(range=[-1, 2])))
    lo, hi = fig.layout.xaxis.range
    assert lo < -4 < 0 < hi < 1  # log10 units around [1e-4, 1]
    assert tuple(fig.layout.yaxis.range) == (-1, 2)


def test_nice_number():
    assert dp.nice_number(37.0) == 20.0
    assert dp.nice_number(5.0) == 5.0
    assert dp.nice_number(0.013) == 0.01
    with pytest.raises(ValueError):
        dp.nice_number(0.0)


def test_torch_like_copies_read_only_arrays_without_warning():
    import warnings

    a = np.linspace(0.0, 1.0, 5)
    a.setflags(write=False)
    with warnings.catch_warnings():
        warnings.simplefilter("error")                 # torch's "not writable" UserWarning
        t = dp.torch_like(a)
        traces = dp.lines(a, {"y": a})
    assert t.dtype == torch.float64 and torch.equal(t, torch.from_numpy(a.copy()))
    t[0] = 5.0                                         # a copy: the array is untouched
    assert a[0] == 0.0 and len(traces) == 1
    w = np.arange(3.0)                                 # writable arrays still convert as before
    assert torch.equal(dp.torch_like(w), torch.tensor([0.0, 1.0, 2.0], dtype=torch.float64))
    ten = torch.ones(2)
    assert dp.torch_like(ten) is ten


# --------------------------------------------------------------------------- live controls, static book

@pytest.mark.parametrize("env", [dp.HTML_ONLY_ENV, dp.HEADLESS_ENV])
def test_live_is_a_placeholder_without_a_frontend(monkeypatch, env):
    """In the static book and in headless runs (grading) live() draws no widget; the book
    build calls fn once at the initial values (a broken live control fails the build),
    grading does not call it."""
    import ipywidgets as widgets

    monkeypatch.delenv(dp.HTML_ONLY_ENV, raising=False)
    monkeypatch.delenv(dp.HEADLESS_ENV, raising=False)
    monkeypatch.setenv(env, "1")
    calls = []
    out = dp.live(lambda C, k, method, fixed_one: calls.append((C, k, method, fixed_one)) or go.Figure(),
                  C=widgets.FloatSlider(value=1.5, min=0.1, max=2.0, description="clip norm C"),
                  k=(0, 10), method=["dp_sgd", "dice_sgd"], fixed_one=widgets.fixed(7))
    assert calls == ([(1.5, 5, "dp_sgd", 7)] if env == dp.HTML_ONLY_ENV else [])
    assert not isinstance(out, widgets.Widget)
    html = out._repr_html_()
    assert dp.LIVE_PLACEHOLDER_CLASS in html and "Binder" in html and "dp.live(" in html and "no Python behind" not in html


def test_live_control_that_fails_fails_the_build(monkeypatch):
    monkeypatch.delenv(dp.HEADLESS_ENV, raising=False)
    monkeypatch.setenv(dp.HTML_ONLY_ENV, "1")
    with pytest.raises(TypeError, match="plotly Figure"):
        dp.live(lambda C: None, C=(0.0, 1.0))
    with pytest.raises(ZeroDivisionError):
        dp.live(lambda C: 1 / 0, C=[("zero", 0.0)])


def test_live_placeholder_links_binder_when_the_build_knows_the_repository(monkeypatch, tmp_path):
    monkeypatch.setenv("DPCLIP_BINDER_URL", "https://mybinder.org/v2/gh/o/r/main?urlpath=lab/tree/")
    monkeypatch.setenv("DPCLIP_BOOK_ROOT", str(tmp_path))
    (tmp_path / "book" / "part1").mkdir(parents=True)
    monkeypatch.chdir(tmp_path / "book" / "part1")
    html = dp.live_placeholder(["C"])._repr_html_()
    assert 'href="https://mybinder.org/v2/gh/o/r/main?urlpath=lab/tree/book/part1"' in html


def test_live_is_a_widget_in_jupyter(monkeypatch):
    import ipywidgets as widgets

    monkeypatch.delenv(dp.HTML_ONLY_ENV, raising=False)
    monkeypatch.delenv(dp.HEADLESS_ENV, raising=False)
    out = dp.live(lambda C: go.Figure(go.Scatter(y=[C])), C=(0.0, 1.0, 0.1))
    assert isinstance(out, widgets.VBox)


# --------------------------------------------------------------------------- page scripts (_ext)

def _offline_assets():
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "_ext" / "offline_assets.py"
    spec = importlib.util.spec_from_file_location("offline_assets_test", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _page(*figs):
    return "".join(dp.BookRenderer().to_mimebundle(f.to_dict())["text/html"] for f in figs)


def test_page_scripts_pick_the_smallest_plotly_bundle(monkeypatch):
    monkeypatch.setenv(dp.HTML_ONLY_ENV, "1")
    oa = _offline_assets()
    flat = _page(go.Figure(go.Scatter(y=[1, 2])), go.Figure(go.Heatmap(z=[[1, 2]])),
                 dp.slider_figure(_frames([1.0, 2.0]), slider_label="C"))
    assert oa.page_trace_types(flat) == {"scatter", "heatmap"}       # the template's types do not count
    assert oa.scripts_for_page(flat) == {"plotly-cartesian.min.js", "dpclip-figures.js"}
    assert oa.scripts_for_page(_page(go.Figure(go.Scatter3d(x=[1], y=[1], z=[1])))) == {"plotly.min.js", "dpclip-figures.js"}
    assert oa.scripts_for_page("<p>text only</p>") == set()
    widget = '<script type="application/vnd.jupyter.widget-view+json">{}</script>'
    assert {"require.js", "embed-amd.js"} <= oa.scripts_for_page(widget)
    assert oa.CARTESIAN_TRACES <= oa.all_trace_types()


def test_binder_url_is_built_from_the_repository_setting():
    oa = _offline_assets()
    opts = {"repository_url": "https://github.com/org/repo", "repository_branch": "dev",
            "launch_buttons": {"binderhub_url": "https://mybinder.org/"}, "path_to_docs": ""}
    assert oa.binder_tree_url(opts) == "https://mybinder.org/v2/gh/org/repo/dev?urlpath=lab/tree/"
    assert oa.binder_tree_url({**opts, "repository_url": "https://gitlab.com/a/b"}) is None


def test_page_figures_are_responsive(monkeypatch):
    """A fixed figure width would be cut off on a phone: the HTML drops it (the JSON keeps it)."""
    monkeypatch.delenv(dp.HTML_ONLY_ENV, raising=False)
    fig = go.Figure(go.Scatter(y=[1, 2]), layout=dict(width=900, height=300))
    bundle = dp.BookRenderer().to_mimebundle(fig.to_dict())
    assert '"width":900' not in bundle["text/html"].replace(" ", "")
    assert bundle[PLOTLY_MIME]["layout"]["width"] == 900
    assert '"responsive":true' in bundle["text/html"].replace(" ", "")


def test_cloud_extent_shows_the_bulk_not_the_outliers():
    G = torch.cat([0.01 * torch.randn(500, 5, generator=torch.Generator().manual_seed(0)),
                   torch.tensor([[0.4, 0, 0, 0, 0]])]).double()
    basis = torch.eye(5, dtype=torch.float64)[:2]
    ext = dp.cloud_extent(G, basis)
    assert 0.01 < ext < 0.1                       # the bulk, not the 0.4 outlier
    assert dp.cloud_extent(G, basis, quantile=1.0, pad=1.0) == pytest.approx(0.4)
    with pytest.raises(ValueError, match="quantile"):
        dp.cloud_extent(G, basis, quantile=0.0)


def test_page_figures_store_float32(monkeypatch):
    """float64 data go into the page as float32 (half the weight); tiny values stay float64."""
    monkeypatch.delenv(dp.HTML_ONLY_ENV, raising=False)
    z = np.linspace(0.0, 1.0, 400).reshape(20, 20)
    html = dp.BookRenderer().to_mimebundle(go.Figure(go.Heatmap(z=z)).to_dict())["text/html"]
    assert '"dtype":"f4"' in html.replace(" ", "") and '"dtype":"f8"' not in html.replace(" ", "")
    tiny = dp.BookRenderer().to_mimebundle(go.Figure(go.Scatter(y=np.array([1e-40, 1.0]))).to_dict())["text/html"]
    assert '"dtype":"f8"' in tiny.replace(" ", "")


# --------------------------------------------------------------------------- roles, arrows, checks (issue #10, item 7)

def test_every_colour_role_has_its_own_colour():
    """One colour, one meaning: no two roles of ``COLORS`` share a colour (the optimum and error
    feedback once were the same green)."""
    by_colour = {}
    for role, colour in dp.COLORS.items():
        by_colour.setdefault(colour.lower(), []).append(role)
    shared = {c: r for c, r in by_colour.items() if len(r) > 1}
    assert not shared, f"colours with two meanings: {shared}"


def test_coinciding_arrows_stay_visible():
    """With nothing clipped the clipped mean equals the true gradient: the arrow drawn on top is
    narrower than the one under it, so neither hides the other."""
    gen = torch.Generator().manual_seed(0)
    G = torch.randn(50, 5, generator=gen, dtype=torch.float64) + 1.0
    basis = dp.plane_basis(G, G.mean(0))
    under = dp.gradient_cloud(G, basis)[1]
    over = dp.clipped_cloud(G, 1e6, basis)[2]           # C so large that nothing is clipped
    assert np.allclose(list(under.x), list(over.x)) and np.allclose(list(under.y), list(over.y))
    assert under.line.width > 2 * over.line.width
    assert under.marker.size[1] > over.marker.size[1]
    nested = dp.arrows({"a": (torch.tensor([1.0, 0.0]), "#000000"), "b": (torch.tensor([1.0, 0.0]), "#ff0000"),
                        "c": (torch.tensor([1.0, 0.0]), "#00ff00")})
    widths = [tr.line.width for tr in nested]
    assert widths == sorted(widths, reverse=True) and len(set(widths)) == 3
    with pytest.raises(ValueError, match="at most"):
        dp.arrows({str(i): (torch.tensor([1.0, 0.0]), "#000000") for i in range(4)})


def test_missing_axis_titles():
    fig = go.Figure(go.Scatter(x=[1, 2], y=[3, 4]))
    assert dp.missing_axis_titles(fig) == ["xaxis", "yaxis"]
    fig.update_layout(xaxis_title="step t", yaxis_title="ε")
    assert dp.missing_axis_titles(fig) == []
    from plotly.subplots import make_subplots
    sub = make_subplots(rows=2, cols=1, shared_xaxes=True)
    sub.add_trace(go.Scatter(x=[1, 2], y=[1, 2]), row=1, col=1)
    sub.add_trace(go.Scatter(x=[1, 2], y=[1, 2]), row=2, col=1)
    sub.update_layout(xaxis2_title="t", yaxis_title="a", yaxis2_title="b")
    assert dp.missing_axis_titles(sub) == []                  # the shared upper x axis shows no ticks
    sub.update_layout(yaxis2_title="")
    assert dp.missing_axis_titles(sub.to_dict()) == ["yaxis2"]
    assert dp.missing_axis_titles(go.Figure(go.Pie(values=[1, 2]))) == []   # not cartesian


@pytest.mark.parametrize("value, spec, text", [
    (-1e-5, ".4f", "0.0000"), (-0.0, ".2f", "0.00"), (-0.00004, ".1%", "0.0%"), (-1.5, ".2f", "-1.50"),
    (928441.0, ".3g", "928,441"), (12.0, ".3g", "12"), (-3.2e-9, ".2e", "-3.20 × 10⁻⁹"), (0.1234, ".2f", "0.12"),
    (3650.4, ".3g", "3.65 × 10³"), (1.207e12, ".4g", "1.207 × 10¹²"), (1e6, ".0e", "10⁶"), (6.1e-10, "+.1e", "+6.1 × 10⁻¹⁰"),
    (1.455e33, ".3g", "1.46 × 10³³"), (2.5e-5, ".3g", "2.5 × 10⁻⁵"), (0.00123, ".3g", "0.00123"),
    (300, "d", "300"), (12000, ",d", "12,000"), (-0.0, ".1f", "0.0"),
])
def test_fmt_prints_no_negative_zero_and_groups_thousands(value, spec, text):
    assert dp.fmt(value, spec) == text


@pytest.mark.parametrize("text, shown", [
    ("2.1e-03", "2.1 × 10⁻³"), ("1e-05", "10⁻⁵"), ("-0.94", "−0.94"), ("-0.00", "0.00"), ("4e-11", "4 × 10⁻¹¹"),
    ("1.5e+06", "1.5 × 10⁶"), ("+0.010", "+0.010"), ("12,345", "12,345"), ("-2.5%", "−2.5%"), ("0.25", "0.25"),
    ("rank 1", "rank 1"), ("3-4", "3-4"), ("-", "-"), ("", ""),
])
def test_readable_writes_glued_numbers_for_prose(text, shown):
    """What _ext/readable_numbers.py and the reader copies print for a glued value."""
    from dpclip_lab.numbers import readable
    assert readable(text) == shown


def test_readable_rejects_non_strings():
    from dpclip_lab.numbers import readable
    with pytest.raises(TypeError, match="text"):
        readable(0.5)


def test_fmt_rejects_non_numbers():
    with pytest.raises(TypeError, match="value"):
        dp.fmt("1.0")
    with pytest.raises(ValueError, match="zero_below"):
        dp.fmt(1.0, zero_below=-1e-12)


def test_fmt_says_rounding_error_is_zero():
    """An exact zero computed in floating point (1.1e-16) is not a number to show a reader."""
    assert dp.fmt(1.1102230246251565e-16, ".2g", zero_below=1e-12) == "0 (rounding error)"
    assert dp.fmt(-8.0e-17, ".2g", zero_below=1e-12) == "0 (rounding error)"
    assert dp.fmt(0.0704, ".2g", zero_below=1e-12) == "0.07"
    assert dp.fmt(2e-9, ".1g", zero_below=1e-12) == "2 × 10⁻⁹"      # small, but not rounding
    assert dp.fmt(float("inf")) == "∞" and dp.fmt(-float("inf"), ".2f") == "−∞"


def test_frames_bring_their_own_ranges_when_axes_are_not_fixed():
    """fix_axes=False: each frame carries its ranges (plotly does not autorange while animating)."""
    rng = np.random.default_rng(0)
    frames = {e: [go.Scatter(x=rng.normal(0, s, 50), y=rng.normal(0, s, 50), mode="markers"),
                  go.Histogram(x=rng.normal(0, s, 200), nbinsx=20, xaxis="x2", yaxis="y2")]
              for e, s in ((0, 0.03), (15, 2.5))}
    from plotly.subplots import make_subplots
    fig = dp.slider_figure(frames, slider_label="epoch", fix_axes=False, base=make_subplots(rows=1, cols=2))
    for frame, (traces) in zip(fig.frames, frames.values()):
        x = np.asarray(traces[0].x)
        lo, hi = frame.layout.xaxis.range
        assert lo <= x.min() and x.max() <= hi and hi - lo < 3 * (x.max() - x.min())
        assert frame.layout.yaxis2.range[0] == 0 and frame.layout.yaxis2.range[1] > 0
    assert fig.layout.xaxis.range == fig.frames[0].layout.xaxis.range


def test_the_page_figure_has_words_and_an_html_legend(monkeypatch):
    monkeypatch.setenv(dp.HTML_ONLY_ENV, "1")
    fig = go.Figure([go.Scatter(x=[1, 2, 3], y=[1, 4, 9], name="squares"),
                     go.Scatter(x=[1, 2, 3], y=[1, 8, 27], name="cubes"),
                     go.Scatter(x=[1, 2, 2, 1], y=[0, 0, 1, 1], fill="toself")],
                    layout=dict(title="Powers", xaxis_title="n", yaxis_title="value"))
    html = dp.BookRenderer().to_mimebundle(fig.to_dict())["text/html"]
    assert html.startswith('<figure class="dpclip-figure" aria-label="Powers. axes x: n; y: value.')
    assert "curves: squares, cubes" in html and "Show the numbers" in html and "<td>1 to 27</td>" in html
    dec = json.JSONDecoder()
    i = re.search(r"Plotly\.newPlot\(\s*", html).end()
    _, i = dec.raw_decode(html, i)
    data, i = dec.raw_decode(html, re.compile(r"\s*,\s*").match(html, i).end())
    spec, _ = dec.raw_decode(html, re.compile(r"\s*,\s*").match(html, i).end())
    assert spec["showlegend"] is False and spec["meta"] == {"dpclip_legend": None}   # the page draws it in HTML
    assert data[2]["mode"] == "lines" and data[2]["hoverinfo"] == "x+y+text"   # band: no corner markers, no "trace 2"


def test_side_by_side_panels_move_apart_for_their_axis_titles():
    from plotly.subplots import make_subplots
    fig = make_subplots(rows=1, cols=2, horizontal_spacing=0.04)
    fig.add_traces([go.Scatter(y=[1, 2]), go.Scatter(y=[2, 1], xaxis="x2", yaxis="y2")])
    fig.update_yaxes(title_text="left", row=1, col=1).update_yaxes(title_text="right", row=1, col=2)
    layout = dp._panels_apart(json.loads(fig.to_json())["layout"], "x")
    gap = layout["xaxis2"]["domain"][0] - layout["xaxis"]["domain"][1]
    assert gap >= dp._GAP_WITH_TITLE["x"] - 1e-9
    centre = sum(layout["xaxis2"]["domain"]) / 2
    assert any(abs(a["x"] - centre) < 1e-9 for a in layout.get("annotations", []) or [{"x": centre}])


def test_a_script_added_twice_is_loaded_once():
    """sphinx-thebe adds its inline config twice; the second copy threw "Identifier 'THEBE_JS_URL'
    has already been declared" on every page."""
    from sphinx.builders.html._assets import _JavaScript

    oa = _offline_assets()
    files = [_JavaScript("", priority=500, body="const A = 1;"), _JavaScript("x.js"),
             _JavaScript("", priority=501, body="const A = 1;"), _JavaScript("x.js"), _JavaScript("", body="const B = 2;")]
    context = {"script_files": files, "body": ""}
    oa._page_scripts(None, "page", "page.html", context, None)
    assert [f.filename or f.attributes["body"] for f in context["script_files"]] == ["const A = 1;", "x.js", "const B = 2;"]


@pytest.mark.parametrize("text, drawn", [
    ("iterate x_t", "iterate x<sub>t</sub>"), ("F_{c,k}(x)", "F<sub>c,k</sub>(x)"), ("ℝ^p", "ℝ<sup>p</sup>"),
    ("‖e_t‖", "‖e<sub>t</sub>‖"), ("(Aᵀξ_i)₁", "(Aᵀξ<sub>i</sub>)₁"), ("x_{t+1}", "x<sub>t+1</sub>"),
    ("per_example_grads", "per_example_grads"), ("a_b_c", "a_b_c"), ("no scripts", "no scripts"), (3, 3),
])
def test_plot_text_draws_tex_like_scripts(text, drawn):
    """Plotly shows "x_t" as typed; the renderer writes the scripts plotly draws."""
    assert dp.plot_text(text) == drawn


def test_the_page_figure_draws_scripts_and_names_every_table_row(monkeypatch):
    monkeypatch.setenv(dp.HTML_ONLY_ENV, "1")
    x = np.arange(3.0)
    fig = go.Figure([go.Scatter(x=x, y=x + 1, name="DiceSGD x_t", legendgroup="d"),
                     go.Scatter(x=x, y=x, legendgroup="d"), go.Scatter(x=x, y=x + 2, fill="tonexty", legendgroup="d"),
                     go.Scatter(x=x, y=0 * x)])
    fig.update_layout(title="error ‖e_t‖", xaxis_title="step t")
    html = dp.BookRenderer().to_mimebundle(fig.to_dict())["text/html"]
    page = re.sub(r"\\u([0-9a-fA-F]{4})", lambda m: chr(int(m.group(1), 16)), html)   # plotly's JSON escapes
    assert "DiceSGD x<sub>t</sub>" in page and "error ‖e<sub>t</sub>‖" in page and "x_t" not in page
    assert "band around DiceSGD xₜ, lower edge" in html and "reference line y = 0" in html
    assert "scatter 2" not in html


def test_slider_on_top_traces_are_drawn_last_and_never_move():
    frames = {v: [go.Scatter(x=[0, 1], y=[v, v], name="moving")] for v in (1.0, 2.0)}
    ref = go.Scatter(x=[0, 1], y=[0, 0], name="x* = 0")
    fig = dp.slider_figure(frames, slider_label="v", static=[go.Scatter(x=[0, 1], y=[5, 5], name="under")], on_top=[ref])
    assert [t.name for t in fig.data] == ["under", "moving", "x* = 0"]
    assert all(list(f.traces) == [1] for f in fig.frames)


def test_histograms_are_drawn_with_the_bins_their_range_was_computed_with(monkeypatch):
    """A fixed y range from numpy's bins, and plotly's own 'nice' bins, disagree: the tallest bar
    left its panel (#28, a third reading). The page figure pins plotly's bins to numpy's."""
    monkeypatch.setenv(dp.HTML_ONLY_ENV, "1")
    rng = np.random.default_rng(0)
    frames = {e: [go.Histogram(x=rng.normal(e, 1, 400), nbinsx=40)] for e in (0.0, 1.0)}
    fig = dp.slider_figure(frames, slider_label="epoch")
    html = dp.BookRenderer().to_mimebundle(fig.to_dict())["text/html"]
    page = re.sub(r"\\u([0-9a-fA-F]{4})", lambda m: chr(int(m.group(1), 16)), html)
    assert '"xbins":{' in page
    trace = dp._reader_trace(fig.data[0].to_plotly_json())
    x = np.asarray(fig.data[0].x)
    assert trace["xbins"]["start"] == x.min() and abs(trace["xbins"]["size"] - (x.max() - x.min()) / 40) < 1e-12


def _table_heads(fig) -> list[str]:
    return re.findall(r"<th scope='(?:row|col)'>(.*?)</th>", dp.numbers_table(fig))


def test_numbers_table_names_unnamed_traces_from_what_the_figure_says():
    """A "Show the numbers" row says what an unnamed trace is: a histogram of its axis, the points
    of a titled panel, a hover label's text, a marked point's text, a colour bar's title (a
    third reading of #28 met "unlabelled histogram 3")."""
    from plotly.subplots import make_subplots

    fig = make_subplots(rows=1, cols=2, subplot_titles=("epoch 0", "epoch 15"))
    fig.add_trace(go.Histogram(x=[0.1, 0.2, 0.4], showlegend=False), row=1, col=1)
    fig.add_trace(go.Scatter(x=[0, 1], y=[2, 3], mode="markers", showlegend=False), row=1, col=2)
    fig.update_xaxes(title_text="cosine", row=1, col=1)
    heads = _table_heads(fig.to_dict())
    assert "histogram of cosine (epoch 0)" in heads and "points (epoch 15)" in heads, heads
    marked = go.Figure([go.Scatter(x=[1, 2], y=[1, 4], name="bound"),
                        go.Scatter(x=[1.5], y=[2], mode="markers+text", text=["Thm 2.2 breaks at ε = 7.97"]),
                        go.Scatter(x=[1.2], y=[3], mode="markers", hovertemplate="DPSGD-GC: chosen η = %{x:g}<extra></extra>")])
    assert _table_heads(marked.to_dict())[-2:] == ["Thm 2.2 breaks at ε = 7.97", "DPSGD-GC: chosen η"]
    heat = go.Figure(go.Heatmap(z=[[1, 2], [3, 4]], x=[0, 1], y=[0, 1], colorbar=dict(title="‖J−Jᵀ‖/‖J‖")))
    assert "‖J−Jᵀ‖/‖J‖" in _table_heads(heat.to_dict())
    # nothing to say: the last resort, which the book's page check rejects
    assert any(h.startswith("unlabelled scatter") for h in _table_heads(go.Figure(
        [go.Scatter(x=[1, 2], y=[1, 2], name="a"), go.Scatter(x=[1, 3], y=[2, 5])]).to_dict()))


def test_numbers_table_bars_over_categories_and_short_grids_whole():
    bars = go.Figure(go.Bar(y=["Song Thm 2.2<br>ε = 1", "DiceSGD"], x=[0.76, 1.5], orientation="h"),
                     layout=dict(xaxis_title="ratio", yaxis_title="formula"))
    assert _table_heads(bars.to_dict()) == ["formula", "ratio", "Song Thm 2.2 ε = 1", "DiceSGD"]
    grid = np.logspace(-2, 1.75, 16)   # steps of 10^0.25: 0.3162 among them
    heads = _table_heads(go.Figure(go.Scatter(x=grid, y=grid ** 2, name="b")).to_dict())
    assert len(heads) == 2 + 16 and "0.3162" in heads, heads      # none of sixteen skipped
    long = np.linspace(0, 1, 40)
    assert len(_table_heads(go.Figure(go.Scatter(x=long, y=long, name="b")).to_dict())) == 2 + 12


def test_numbers_table_tells_curves_of_one_name_apart():
    """Two curves of one name get their panel's title, their y axis's, or their place (#28's fourth
    reading: "E⟨∇f, g⟩" twice in a table, one per panel, with no d = 1 / d = 10)."""
    from plotly.subplots import make_subplots

    fig = make_subplots(rows=1, cols=2, subplot_titles=("d = 1", "d = 10"))
    for col in (1, 2):
        fig.add_trace(go.Scatter(x=[1, 2, 3], y=[1, 2, 3], name="E", showlegend=col == 1), row=1, col=col)
    assert _table_heads(fig.to_dict())[1:3] == ["E (d = 1)", "E (d = 10)"]
    runs = go.Figure([go.Scatter(x=list(range(k + 2)), y=list(range(k + 2)), name="run") for k in range(3)])
    assert [h for h in _table_heads(runs.to_dict()) if h.startswith("run")] == ["run (1 of 3)", "run (2 of 3)", "run (3 of 3)"]
    seeds = go.Figure([go.Scatter(x=[c, c], y=[0, 1], name="seed") for c in (0.1, 1.0)], layout=dict(xaxis_title="C"))
    assert [h for h in _table_heads(seeds.to_dict()) if h.startswith("seed")] == ["seed, C = 0.1", "seed, C = 1"]


def test_numbers_table_prints_rounding_error_on_a_linear_axis_as_zero():
    """6.163 × 10⁻³³ beside 12.5 on one linear axis is drawn at zero and is zero (#28's fourth
    reading); on a log axis a small value is drawn where it is and stays."""
    lin = go.Figure([go.Scatter(x=[0, 1, 2], y=[6.163e-33, 1.0, 12.5], name="f")])
    assert _table_heads(lin.to_dict()) and "10⁻³³" not in dp.numbers_table(lin.to_dict())
    assert "<td>0</td>" in dp.numbers_table(lin.to_dict())
    log = go.Figure([go.Scatter(x=[0, 1, 2], y=[6.163e-33, 1.0, 12.5], name="f")], layout=dict(yaxis_type="log"))
    assert "6.163 × 10⁻³³" in dp.numbers_table(log.to_dict())


def test_log_axes_label_their_minor_ticks_as_whole_numbers():
    """A bare "5" below "1" on a log axis means 0.5; a reader of the book took it for 5 (#28)."""
    from dpclip_lab.plotting import _reader_defaults

    fig = go.Figure(go.Scatter(x=[1, 100], y=[0.5, 20]), layout=dict(yaxis_type="log", xaxis=dict(type="log", minorloglabels="none")))
    layout = _reader_defaults(fig.to_plotly_json())["layout"]
    assert layout["yaxis"]["minorloglabels"] == "complete" and layout["xaxis"]["minorloglabels"] == "none"


def test_log_axes_read_as_the_book_writes_numbers():
    """A fifth reading of #28: plotly's "power" labels read "2x10" for 20 and "5x10⁻¹" for 0.5 on log
    axes. The page's log axes carry their own labels: plain numbers where every tick lies in
    [10⁻³, 10⁴), 10⁻⁵ and 2×10⁻⁵ beyond; an axis that names its ticks keeps them."""
    from dpclip_lab.plotting import _reader_defaults, log_tick_text, log_ticks

    assert [log_tick_text(v) for v in (0.002, 0.5, 20, 5000)] == ["0.002", "0.5", "20", "5000"]
    assert [log_tick_text(v, plain=False) for v in (1e-5, 2e-5, 1.0, 10.0, 5e33)] == \
        ["10⁻⁵", "2×10⁻⁵", "1", "10", "5×10³³"]
    assert log_ticks(-1, 0.5) == [0.1, 0.2, 0.5, 1.0, 2.0]
    assert len(log_ticks(-12, 34)) <= 8 and len(log_ticks(-5, 2)) == 8
    with pytest.raises(ValueError, match="v must be a positive"):
        log_tick_text(0.0)
    with pytest.raises(ValueError, match="lo and hi"):
        log_ticks(2, 1)
    fig = go.Figure(go.Scatter(x=[20, 2000], y=[1e-6, 3e-2]),
                    layout=dict(xaxis_type="log", yaxis=dict(type="log", range=[-5, 0]),
                                yaxis2=dict(type="log", tickvals=[1, 10], ticktext=["one", "ten"])))
    layout = _reader_defaults(fig.to_plotly_json())["layout"]
    assert layout["xaxis"]["ticktext"] == ["20", "50", "100", "200", "500", "1000", "2000"]
    assert layout["yaxis"]["ticktext"] == ["10⁻⁵", "10⁻⁴", "10⁻³", "10⁻²", "10⁻¹", "1"]
    assert layout["yaxis2"]["ticktext"] == ["one", "ten"]
    assert not any("x10" in t for ax in ("xaxis", "yaxis") for t in layout[ax]["ticktext"])
    # numpy data reach the renderer as base64 typed arrays: their extent counts too
    fig = go.Figure(go.Scatter(x=np.arange(1.0, 5.0), y=np.array([0.003, 0.01, 0.03, 0.07])), layout=dict(yaxis_type="log"))
    layout = _reader_defaults(json.loads(pio.to_json(fig)))["layout"]
    assert layout["yaxis"]["ticktext"] == ["0.005", "0.01", "0.02", "0.05"]
