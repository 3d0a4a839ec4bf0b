/* dpclip-lab: the book's figures as a reader meets them (loaded on pages that draw a plotly figure).
 *
 * The legend is HTML under the figure, not plotly's own: plotly draws its legend inside the
 * figure, where at 400 px (and often at 1280) it lands on the slider, the data or a subplot
 * title. An HTML legend wraps with the page, is read by screen readers, and each entry is a
 * button (click, Enter or Space hides and shows its curves, as plotly's legend does).
 * dpclip_lab.plotting's renderer turns plotly's legend off in the page and records in
 * layout.meta.dpclip_legend whether the figure asked for one (true, false, or null: plotly's
 * default, a legend when two or more traces have names).
 */
(function () {
  "use strict";

  var DASH = {dash: "5,3", dot: "1.5,3", dashdot: "5,3,1.5,3", longdash: "9,3", longdashdot: "9,3,1.5,3"};
  var SAFE_TAGS = /^(sub|sup|b|i|em|br)$/i;

  function escapeName(name) {
    // plotly names may hold <sub>, <sup>, <b>, <i>, <br>; keep those, escape the rest
    var text = String(name).replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;");
    return text.replace(/&lt;(\/?)([a-z]+)\s*\/?&gt;/gi, function (m, slash, tag) {
      return SAFE_TAGS.test(tag) ? "<" + slash + tag.toLowerCase() + ">" : m;
    });
  }

  function first(value, fallback) {
    if (value === undefined || value === null) return fallback;
    if (Array.isArray(value) || ArrayBuffer.isView(value)) return value.length ? value[0] : fallback;
    return value;
  }

  function swatch(tr) {
    var ns = "http://www.w3.org/2000/svg";
    var svg = document.createElementNS(ns, "svg");
    svg.setAttribute("width", "28");
    svg.setAttribute("height", "14");
    svg.setAttribute("aria-hidden", "true");
    svg.setAttribute("focusable", "false");
    var mode = tr.mode || "";
    var marker = tr.marker || {};
    var line = tr.line || {};
    var filled = (tr.fill && tr.fill !== "none") || tr.type === "bar" || tr.type === "histogram";
    if (filled) {
      var rect = document.createElementNS(ns, "rect");
      rect.setAttribute("x", "2"); rect.setAttribute("y", "2");
      rect.setAttribute("width", "24"); rect.setAttribute("height", "10");
      rect.setAttribute("fill", tr.fillcolor || first(marker.color, line.color) || "#888");
      rect.setAttribute("fill-opacity", String(tr.type === "bar" || tr.type === "histogram" ? (tr.opacity || 1) : 0.5));
      if (line.color && line.width) { rect.setAttribute("stroke", line.color); rect.setAttribute("stroke-width", "1"); }
      svg.appendChild(rect);
      return svg;
    }
    if (mode.indexOf("lines") >= 0 || (!mode && tr.type !== "scatter")) {
      var path = document.createElementNS(ns, "line");
      path.setAttribute("x1", "1"); path.setAttribute("x2", "27");
      path.setAttribute("y1", "7"); path.setAttribute("y2", "7");
      path.setAttribute("stroke", line.color || "#444");
      path.setAttribute("stroke-width", String(Math.max(1.5, Math.min(line.width || 2, 5))));
      if (DASH[line.dash]) path.setAttribute("stroke-dasharray", DASH[line.dash]);
      svg.appendChild(path);
    }
    if (mode.indexOf("markers") >= 0) {
      var symbol = String(first(marker.symbol, "circle"));
      var color = first(marker.color, line.color) || "#444";
      var open = /open/.test(symbol);
      var size = Math.max(5, Math.min(first(marker.size, 6), 10));
      var shape;
      if (/square/.test(symbol)) {
        shape = document.createElementNS(ns, "rect");
        shape.setAttribute("x", String(14 - size / 2)); shape.setAttribute("y", String(7 - size / 2));
        shape.setAttribute("width", String(size)); shape.setAttribute("height", String(size));
      } else if (/diamond/.test(symbol)) {
        shape = document.createElementNS(ns, "polygon");
        var h = size / 1.6;
        shape.setAttribute("points", [14, 7 - h, 14 + h, 7, 14, 7 + h, 14 - h, 7].join(","));
      } else if (/triangle|x|cross/.test(symbol)) {
        shape = document.createElementNS(ns, "polygon");
        var t = size / 1.6;
        shape.setAttribute("points", [14, 7 - t, 14 + t, 7 + t, 14 - t, 7 + t].join(","));
      } else {
        shape = document.createElementNS(ns, "circle");
        shape.setAttribute("cx", "14"); shape.setAttribute("cy", "7"); shape.setAttribute("r", String(size / 2));
      }
      shape.setAttribute("fill", open ? "white" : color);
      shape.setAttribute("stroke", color);
      shape.setAttribute("stroke-width", open ? "1.5" : "0.5");
      svg.appendChild(shape);
    }
    return svg;
  }

  function legendItems(gd) {
    var items = [], byGroup = {};
    gd._fullData.forEach(function (tr, i) {
      var key = tr.legendgroup ? "g:" + tr.legendgroup : "t:" + i;
      if (byGroup[key]) { byGroup[key].indices.push(tr.index); return; }
      if (tr.showlegend === false || !tr.name) {
        if (tr.legendgroup) byGroup[key] = {indices: [tr.index], trace: null, pending: true};
        return;
      }
      var item = byGroup[key] && byGroup[key].pending ? byGroup[key] : {indices: []};
      item.indices.push(tr.index);
      item.trace = tr; item.pending = false; item.name = tr.legendgrouptitle && tr.legendgrouptitle.text && !tr.name ? tr.legendgrouptitle.text : tr.name;
      byGroup[key] = item;
      items.push(item);
    });
    return items;
  }

  function wanted(gd, items) {
    var meta = (gd.layout && gd.layout.meta) || {};
    var asked = meta.dpclip_legend;
    if (asked === false) return false;
    if (asked === true) return items.length >= 1;
    return items.length >= 2;
  }

  function buildLegend(gd) {
    if (!gd._fullData || gd.dataset.dpclipLegend) return;
    gd.dataset.dpclipLegend = "done";
    var meta = (gd.layout && gd.layout.meta) || {};
    if (!("dpclip_legend" in meta)) return;          // a figure not drawn by the book's renderer
    var items = legendItems(gd);
    if (!wanted(gd, items)) return;
    var box = document.createElement("div");
    box.className = "dpclip-legend";
    box.setAttribute("role", "group");
    var title = gd._fullLayout.legend && gd._fullLayout.legend.title && gd._fullLayout.legend.title.text;
    box.setAttribute("aria-label", "Legend" + (title ? ": " + title.replace(/<[^>]+>/g, "") : "") +
                     " (each entry shows or hides its curve)");
    if (title) {
      var t = document.createElement("span");
      t.className = "dpclip-legend-title";
      t.innerHTML = escapeName(title);
      box.appendChild(t);
    }
    items.forEach(function (item) {
      var b = document.createElement("button");
      b.type = "button";
      b.className = "dpclip-legend-item";
      var shown = item.trace.visible !== "legendonly";
      b.setAttribute("aria-pressed", shown ? "true" : "false");
      b.appendChild(swatch(item.trace));
      var label = document.createElement("span");
      label.innerHTML = escapeName(item.name);
      b.appendChild(label);
      b.addEventListener("click", function () {
        var show = b.getAttribute("aria-pressed") !== "true";
        b.setAttribute("aria-pressed", show ? "true" : "false");
        window.Plotly.restyle(gd, {visible: show ? true : "legendonly"}, item.indices);
      });
      box.appendChild(b);
    });
    // after the figure's box (plotly's wrapper has a fixed height; a scrolling panel row scrolls alone)
    var anchor = gd.closest(".dpclip-figure-scroll") || gd.parentNode;
    var after = anchor.nextSibling && anchor.nextSibling.classList && anchor.nextSibling.classList.contains("dpclip-slider-keys")
      ? anchor.nextSibling : anchor;
    after.parentNode.insertBefore(box, after.nextSibling);
  }

  /* Sliders by keyboard (plotly's own slider takes only the mouse): a control under the figure is
   * a tab stop with role="slider"; ArrowLeft/ArrowRight (and Down/Up) move one step, Home/End to
   * the first/last, PageDown/PageUp by a tenth; the step's label is announced (aria-valuetext). */
  function sliderOf(gd) {
    var s = gd._fullLayout && gd._fullLayout.sliders && gd._fullLayout.sliders[0];
    return s && s.steps && s.steps.length > 1 ? s : null;
  }

  function control(gd) {
    return document.querySelector('.dpclip-slider-keys[data-figure="' + gd.id + '"]');
  }

  function describeStep(gd) {
    var s = sliderOf(gd), el = control(gd);
    if (!s || !el) return;
    var k = s.active || 0;
    var prefix = (s.currentvalue && s.currentvalue.prefix) || "";
    var text = (prefix + s.steps[k].label).trim();
    el.setAttribute("aria-valuemin", "0");
    el.setAttribute("aria-valuemax", String(s.steps.length - 1));
    el.setAttribute("aria-valuenow", String(k));
    el.setAttribute("aria-valuetext", text);
    el.querySelector(".dpclip-slider-value").textContent = text;
  }

  function goToStep(gd, k) {
    var s = sliderOf(gd);
    if (!s) return Promise.resolve();
    k = Math.max(0, Math.min(s.steps.length - 1, k));
    var step = s.steps[k], args = step.args || [];
    var done;
    if (step.method === "animate") {
      done = window.Plotly.animate(gd, args[0], {mode: "immediate", frame: {duration: 0, redraw: true}, transition: {duration: 0}});
    } else if (step.method && window.Plotly[step.method]) {
      done = window.Plotly[step.method].apply(null, [gd].concat(args));
    } else {
      done = Promise.resolve();
    }
    return Promise.resolve(done).then(function () {
      return window.Plotly.relayout(gd, {"sliders[0].active": k});
    }).then(function () { describeStep(gd); });
  }

  /* The keyboard control sits under the figure, outside plotly's SVG (a role="slider" may not
   * hold plotly's own buttons): a tab stop showing the slider's value, moved by the keys. */
  function keyboardSlider(gd) {
    var s = sliderOf(gd);
    if (!s || control(gd)) return;
    var label = ((s.currentvalue && s.currentvalue.prefix) || "slider").replace(/[\s=:]+$/, "");
    var el = document.createElement("div");
    el.className = "dpclip-slider-keys";
    el.dataset.figure = gd.id;
    el.setAttribute("tabindex", "0");
    el.setAttribute("role", "slider");
    el.setAttribute("aria-label", label);
    el.setAttribute("aria-orientation", "horizontal");
    el.innerHTML = '<span class="dpclip-slider-value"></span>' +
      '<span class="dpclip-slider-hint" aria-hidden="true"> · keys ← → move the slider, Home/End jump</span>';
    var anchor = gd.closest(".dpclip-figure-scroll") || gd.parentNode;
    anchor.parentNode.insertBefore(el, anchor.nextSibling);
    describeStep(gd);
    el.addEventListener("keydown", function (e) {
      var s2 = sliderOf(gd), k = (s2 && s2.active) || 0, n = s2 ? s2.steps.length : 0, to = null;
      var big = Math.max(1, Math.round(n / 10));
      if (e.key === "ArrowRight" || e.key === "ArrowUp") to = k + 1;
      else if (e.key === "ArrowLeft" || e.key === "ArrowDown") to = k - 1;
      else if (e.key === "Home") to = 0;
      else if (e.key === "End") to = n - 1;
      else if (e.key === "PageUp") to = k + big;
      else if (e.key === "PageDown") to = k - big;
      if (to === null || !s2) return;
      e.preventDefault();
      goToStep(gd, to);
    });
    if (gd.on) gd.on("plotly_sliderchange", function () { setTimeout(function () { describeStep(gd); }, 0); });
  }

  function setUp(gd) {
    if (gd._fullData) { keyboardSlider(gd); buildLegend(gd); }
    if (gd.on && !gd.dataset.dpclipHooked) {
      gd.dataset.dpclipHooked = "1";
      gd.on("plotly_afterplot", function () { keyboardSlider(gd); buildLegend(gd); });
    }
  }

  function scan() {
    Array.prototype.forEach.call(document.querySelectorAll(".plotly-graph-div"), setUp);
  }

  window.dpclipFigures = {scan: scan, legendItems: legendItems, goToStep: goToStep};
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", scan);
  else scan();
  window.addEventListener("load", scan);
})();
