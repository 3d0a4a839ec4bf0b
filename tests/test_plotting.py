"""The book's plotly renderer and slider helper (dpclip_lab.plotting)."""
import json

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
