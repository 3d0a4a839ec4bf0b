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
      } else if (/star/.test(symbol)) {
        shape = document.createElementNS(ns, "polygon");
        var pts = [], R = size / 1.3;
        for (var k = 0; k < 10; k++) {
          var rr = k % 2 ? R * 0.45 : R, ang = -Math.PI / 2 + k * Math.PI / 5;
          pts.push((14 + rr * Math.cos(ang)).toFixed(2), (7 + rr * Math.sin(ang)).toFixed(2));
        }
        shape.setAttribute("points", pts.join(","));
      } else if (/^(x|cross)/.test(symbol)) {      // plotly's x and cross: two bars
        shape = document.createElementNS(ns, "path");
        var c = size / 1.7, w = c / 2.6;
        var bar = "M" + (14 - c) + "," + (7 - w) + "h" + 2 * c + "v" + 2 * w + "h" + (-2 * c) + "z" +
                  "M" + (14 - w) + "," + (7 - c) + "h" + 2 * w + "v" + 2 * c + "h" + (-2 * w) + "z";
        shape.setAttribute("d", bar);
        if (/^x/.test(symbol)) shape.setAttribute("transform", "rotate(45 14 7)");
      } else if (/triangle/.test(symbol)) {
        shape = document.createElementNS(ns, "polygon");
        var t = size / 1.6;
        var down = /down/.test(symbol);
        shape.setAttribute("points", (down ? [14, 7 + t, 14 + t, 7 - t, 14 - t, 7 - t] : [14, 7 - t, 14 + t, 7 + t, 14 - t, 7 + t]).join(","));
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

  // One entry per legend group (a curve, its band's edges, its copies in other panels), and one more
  // for each other name the group shows in the legend (a measured curve and its dashed rate: plotly
  // lists both, so does this legend); a trace goes with the entry of its own name.
  function legendItems(gd) {
    var items = [], byGroup = {};
    gd._fullData.forEach(function (tr, i) {
      var key = tr.legendgroup ? "g:" + tr.legendgroup : "t:" + i;
      var named = tr.showlegend !== false && !!tr.name, group = byGroup[key];
      if (group && !group.pending) {
        var sub = tr.name && tr.name !== group.name ? group.subs[tr.name] : null;
        if (!sub && named && tr.name !== group.name) {
          sub = group.subs[tr.name] = {indices: [], trace: tr, name: tr.name, subs: {}};
          items.push(sub);
        }
        (sub || group).indices.push(tr.index);
        return;
      }
      // a group's unnamed traces (a band's edges) may come before its named one (the band's mean)
      if (group && !named) { group.indices.push(tr.index); return; }
      if (!named) {
        if (tr.legendgroup) byGroup[key] = {indices: [tr.index], trace: null, pending: true, subs: {}};
        return;
      }
      var item = group || {indices: [], subs: {}};
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
    var text = plain(prefix + s.steps[k].label).trim();
    el.setAttribute("aria-valuemin", "0");
    el.setAttribute("aria-valuemax", String(s.steps.length - 1));
    el.setAttribute("aria-valuenow", String(k));
    el.setAttribute("aria-valuetext", text);
  }

  /* A slider label's text without its markup ("G = ‖g<sub>1</sub>‖" reads "G = ‖g₁‖"). */
  var SUB = {"0": "₀", "1": "₁", "2": "₂", "3": "₃", "4": "₄", "5": "₅", "6": "₆", "7": "₇", "8": "₈", "9": "₉"};
  var SUP = {"0": "⁰", "1": "¹", "2": "²", "3": "³", "4": "⁴", "5": "⁵", "6": "⁶", "7": "⁷", "8": "⁸", "9": "⁹", "-": "⁻", "−": "⁻"};
  function plain(html) {
    var t = String(html).replace(/<(sub|sup)>([^<]*)<\/\1>/g, function (m, tag, inner) {
      var map = tag === "sub" ? SUB : SUP;
      return inner.split("").every(function (c) { return map[c]; }) ? inner.split("").map(function (c) { return map[c]; }).join("") : inner;
    });
    var d = document.createElement("div");
    d.innerHTML = t;
    return d.textContent;
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
    var label = plain((s.currentvalue && s.currentvalue.prefix) || "slider").replace(/[\s=:]+$/, "");
    var el = document.createElement("div");
    el.className = "dpclip-slider-keys";
    el.dataset.figure = gd.id;
    el.setAttribute("tabindex", "0");
    el.setAttribute("role", "slider");
    el.setAttribute("aria-label", label);
    el.setAttribute("aria-orientation", "horizontal");
    // plotly shows the value above the slider; this tab stop says how to move it (its value is
    // read out by a screen reader: aria-valuetext)
    var hint = document.createElement("span");
    hint.className = "dpclip-slider-hint";
    hint.textContent = label + ": keys ← → move the slider, Home/End jump";
    el.appendChild(hint);
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

  /* Side-by-side panels on a narrow screen stand one above the other (a phone showed only the
   * first panel of a row). Where a panel would be narrower than PANEL_MIN px, the figure's panels
   * are laid out in one column in reading order (row by row, left to right); their subplot
   * titles move with them, the slider keeps its distance below the plot, and the figure grows
   * in height. A wider column (the phone turned, a window widened) restores the row. */
  var PANEL_MIN = 220, STACK_GAP = 120;

  function panelsOf(gd) {
    var L = gd.layout || {}, out = [];
    Object.keys(L).forEach(function (k) {
      var m = /^xaxis(\d*)$/.exec(k), ax = L[k];
      if (!m || !ax || !ax.domain || ax.overlaying || ax.anchor === "free") return;
      var yk = "yaxis" + String(ax.anchor || "y").slice(1), ya = L[yk];
      if (!ya) return;
      out.push({x: k, y: yk, xd: ax.domain.slice(), yd: (ya.domain || [0, 1]).slice()});
    });
    out.sort(function (a, b) {
      return (Math.round(b.yd[1] * 1000) - Math.round(a.yd[1] * 1000)) || (a.xd[0] - b.xd[0]);
    });
    return out;
  }

  function stackPanels(gd) {
    if (!gd._fullLayout || !window.Plotly) return;
    var box = gd.closest(".dpclip-figure-scroll");
    if (!box) return;                                   // the renderer wraps multi-panel figures only
    var saved = gd._dpclipStack;
    var used = {};                                      // the x axes that draw a trace
    (gd._fullData || []).forEach(function (t) { used["xaxis" + String(t.xaxis || "x").slice(1)] = 1; });
    var all = saved ? saved.all : panelsOf(gd);
    var P = saved ? saved.panels : all.filter(function (p) { return used[p.x]; });   // an empty grid cell takes no room
    var columns = {}; all.forEach(function (p) { columns[Math.round(p.xd[0] * 1000)] = 1; });
    var ncol = Object.keys(columns).length;
    if (ncol < 2) return;
    var width = (box.parentNode || box).clientWidth;
    var narrow = width / ncol < PANEL_MIN;
    if (narrow === Boolean(saved && saved.stacked)) {
      if (narrow && gd._fullLayout.width !== box.clientWidth) window.Plotly.relayout(gd, {width: box.clientWidth});
      return;
    }
    if (!narrow) {                                      // back to the row the figure was drawn as
      gd.style.minWidth = saved.minWidth;
      gd.style.height = saved.height;
      if (gd.parentNode !== box) gd.parentNode.style.height = saved.wrapperHeight;
      box.setAttribute("aria-label", saved.label);
      box.classList.remove("dpclip-stacked");
      saved.stacked = false;
      window.Plotly.relayout(gd, Object.assign({width: null}, saved.original));
      return;
    }
    var L = gd._fullLayout, m = L.margin, rows = {};
    P.forEach(function (p) { rows[Math.round(p.yd[1] * 1000)] = 1; });
    var plotH0 = L.height - m.t - m.b, n = P.length;
    var panelPx = Math.max(200, plotH0 / Object.keys(rows).length - (Object.keys(rows).length > 1 ? STACK_GAP / 2 : 0));
    var plotH = n * panelPx + (n - 1) * STACK_GAP;
    var update = {height: plotH + m.t + m.b}, original = {height: L.height};
    P.forEach(function (p, i) {
      var top = 1 - i * (panelPx + STACK_GAP) / plotH, bottom = top - panelPx / plotH;
      update[p.x + ".domain"] = [0, 1]; original[p.x + ".domain"] = p.xd;
      update[p.y + ".domain"] = [bottom, top]; original[p.y + ".domain"] = p.yd;
      p.top = top;
      Object.keys(gd.layout).forEach(function (k) {     // a second y axis over this panel follows it
        var ax = gd.layout[k];
        if (/^yaxis\d*$/.test(k) && ax && ax.overlaying === p.y.replace("axis", "")) {
          update[k + ".domain"] = [bottom, top]; original[k + ".domain"] = (ax.domain || [0, 1]).slice();
        }
      });
    });
    all.forEach(function (p) {
      if (P.indexOf(p) >= 0) return;
      update[p.x + ".visible"] = false; update[p.y + ".visible"] = false;
      original[p.x + ".visible"] = gd.layout[p.x].visible; original[p.y + ".visible"] = gd.layout[p.y].visible;
    });
    var anns = gd.layout.annotations || [];
    var moved = anns.map(function (a) {
      if (a.xref !== "paper" || a.yref !== "paper") return a;
      var p = P.filter(function (q) { return a.x >= q.xd[0] - 1e-6 && a.x <= q.xd[1] + 1e-6 && Math.abs(a.y - q.yd[1]) < 0.03; })[0];
      if (!p) return a;                                 // only a subplot title (at its panel's top) moves
      var b = Object.assign({}, a); b.x = 0.5; b.y = p.top + (a.y - p.yd[1]);
      return b;
    });
    if (anns.length) { update.annotations = moved; original.annotations = anns; }
    var s = gd.layout.sliders && gd.layout.sliders[0];
    if (s && typeof s.y === "number" && s.y < 0) {      // the same distance (px) below the plot
      update["sliders[0].y"] = s.y * plotH0 / plotH; original["sliders[0].y"] = s.y;
    }
    gd._dpclipStack = {panels: P, all: all, stacked: true, original: original, minWidth: gd.style.minWidth,
                       height: gd.style.height, wrapperHeight: gd.parentNode.style.height,
                       label: box.getAttribute("aria-label") || ""};
    gd.style.minWidth = "0";
    gd.style.height = update.height + "px";            // the div's own height (plotly's default_height),
    if (gd.parentNode !== box) gd.parentNode.style.height = update.height + "px";   // and its wrapper's
    box.setAttribute("aria-label", "figure with " + n + " panels, one above the other");
    box.classList.add("dpclip-stacked");
    update.width = box.clientWidth;
    window.Plotly.relayout(gd, update);
  }

  /* Titles that do not fit: plotly draws a title, an annotation (subplot titles) or an axis title
   * on one line and cuts it at the figure's edge (on a phone, most chapter titles). Such a text is
   * broken into lines at spaces; a figure title that grows gets the room above the plot. */
  function wrapText(text, maxChars) {
    var words = String(text).split(" "), lines = [], line = "";
    words.forEach(function (w) {
      var plain = (line + " " + w).replace(/<[^>]+>/g, "").trim();
      if (line && plain.length > maxChars) { lines.push(line); line = w; } else { line = line ? line + " " + w : w; }
    });
    if (line) lines.push(line);
    return lines;
  }

  function fitTitles(gd) {
    var fl = gd._fullLayout;
    if (!fl || !window.Plotly) return;
    if (gd._dpclipFitted === fl.width) return;
    gd._dpclipFitted = fl.width;
    var g = gd.getBoundingClientRect(), update = {}, PAD = 6;
    function tooWide(el, vertical) {
      var r = el.getBoundingClientRect();
      return vertical ? r.top < g.top - 1 || r.bottom > g.bottom + 1 : r.left < g.left + PAD - 1 || r.right > g.right - PAD + 1;
    }
    function lines(el, value, room, vertical) {
      var r = el.getBoundingClientRect(), size = vertical ? r.height : r.width;
      var chars = String(value).replace(/<[^>]+>/g, "").length || 1;
      return wrapText(value, Math.max(8, Math.floor(chars * room / size)));
    }
    var t = gd.querySelector(".infolayer .g-gtitle text");
    if (t && tooWide(t) && text(fl.title)) {
      var L = lines(t, text(fl.title), g.width - 2 * PAD - 10);
      update["title.text"] = L.join("<br>");
      var size = (fl.title.font && fl.title.font.size) || 17;
      update["margin.t"] = fl.margin.t + (L.length - 1) * Math.round(size * 1.3);
      // from the top of the figure down, above whatever sits over the plot (subplot titles)
      update["title.yref"] = "container"; update["title.yanchor"] = "top";
      // plotly sets a title of n lines with its first line at y: the lines below push it up by n - 1
      update["title.y"] = 1 - (8 + (L.length - 1) * Math.round(size * 1.3)) / (fl.height);
    }
    Array.prototype.forEach.call(gd.querySelectorAll(".infolayer .annotation"), function (el) {
      var i = Number(el.getAttribute("data-index")), a = (gd.layout.annotations || [])[i];
      if (!a || a.showarrow || a.xref !== "paper" || !a.text || !tooWide(el)) return;
      var r = el.getBoundingClientRect(), mid = (r.left + r.right) / 2;   // centred on its panel
      var room = a.xanchor === "left" ? g.right - r.left : a.xanchor === "right" ? r.right - g.left
        : 2 * Math.min(mid - g.left, g.right - mid);
      update["annotations[" + i + "].text"] = lines(el, a.text, room - 2 * PAD - 10).join("<br>");
    });
    Array.prototype.forEach.call(gd.querySelectorAll(".infolayer text[class$=title]"), function (el) {
      var m = /^([xy])(\d*)title$/.exec(el.getAttribute("class") || "");
      if (!m) return;
      var key = m[1] + "axis" + m[2], ax = gd.layout[key], value = ax && text(ax.title);
      var vertical = m[1] === "y", full = fl[key];
      if (!value || !tooWide(el, vertical)) return;
      var room = full && full._length ? full._length + 30 : (vertical ? g.height : g.width) - 2 * PAD - 10;
      update[key + ".title.text"] = lines(el, value, room, vertical).join("<br>");
    });
    // slider step labels centred on the first and last ticks can stick out of the figure: the
    // slider is narrowed (and moved) by what sticks out
    var s = fl.sliders && fl.sliders[0], labels = gd.querySelectorAll(".slider-container .slider-label-group text, .slider-container text.slider-label");
    if (s && labels.length) {
      var out = {l: 0, r: 0};
      Array.prototype.forEach.call(labels, function (el) {
        var r = el.getBoundingClientRect();
        if (!r.width) return;
        out.l = Math.max(out.l, g.left + PAD - r.left);
        out.r = Math.max(out.r, r.right - (g.right - PAD));
      });
      if (out.l > 0 || out.r > 0) {
        var W = Math.max(1, fl.width - fl.margin.l - fl.margin.r);   // the slider's x and len are fractions of this
        update["sliders[0].x"] = (s.x || 0) + out.l / W;
        update["sliders[0].len"] = Math.max(0.3, (s.len || 1) - (out.l + out.r) / W);
      }
    }
    if (Object.keys(update).length) window.Plotly.relayout(gd, update);
  }

  // Tick labels of one axis drawn on each other (plotly's log axes label the digits 2-9 of each
  // decade, "D1", or 2 and 5, "D2", from an estimate of the label size that the superscripted
  // "10⁻³" beats on a short panel): the axis gets coarser ticks, D1 -> D2 -> every decade -> every
  // second decade; a linear axis gets half as many. Checked again after each redraw (a few times).
  function crowded(labels) {
    var boxes = labels.map(function (el) { return el.getBoundingClientRect(); })
      .filter(function (r) { return r.width > 0 && r.height > 0; });
    for (var i = 0; i < boxes.length; i++) {
      for (var j = i + 1; j < boxes.length; j++) {
        var a = boxes[i], b = boxes[j];
        if (Math.min(a.right, b.right) - Math.max(a.left, b.left) > 1 && Math.min(a.bottom, b.bottom) - Math.max(a.top, b.top) > 1) return true;
      }
    }
    return false;
  }

  var LOG_STEPS = ["D1", "D2", 1, 2, 3, 5];

  function thinTicks(gd) {
    var fl = gd._fullLayout, update = {};
    if (!fl || !window.Plotly) return;
    gd._dpclipThinned = gd._dpclipThinned || {};
    Object.keys(fl).forEach(function (key) {
      if (!/^[xy]axis\d*$/.test(key)) return;
      var ax = fl[key];
      var ours = ((gd.layout && gd.layout.meta) || {}).dpclip_log_ticks || [];
      var array = ax.tickmode === "array";
      // ticks a chapter named itself stay; the log labels the lab wrote may thin
      if (!ax || !ax._id || ax.visible === false || (array && ours.indexOf(key) < 0)) return;
      var labels = Array.prototype.filter.call(gd.querySelectorAll("." + ax._id + "tick text"),
        function (el) { return (el.textContent || "").trim(); });
      if (labels.length < 2 || !crowded(labels)) return;
      var tries = (gd._dpclipThinned[key] || 0) + 1;
      if (tries > 4) return;
      gd._dpclipThinned[key] = tries;
      if (array) {
        // keep the powers of ten; where there are only those, every other one
        var vals = ax.tickvals || [], texts = ax.ticktext || [], keepV = [], keepT = [];
        var powers = vals.filter(function (v) { return Math.abs(Math.log10(v) - Math.round(Math.log10(v))) < 1e-9; });
        vals.forEach(function (v, i) {
          var p = powers.indexOf(v);
          var keep = powers.length < vals.length ? p >= 0 : i % 2 === 0;
          if (keep) { keepV.push(v); keepT.push(texts[i]); }
        });
        if (keepV.length >= 2 && keepV.length < vals.length) {
          update[key + ".tickvals"] = keepV;
          update[key + ".ticktext"] = keepT;
        }
      } else if (ax.type === "log") {
        var at = LOG_STEPS.indexOf(ax.dtick);
        var next = at >= 0 ? LOG_STEPS[at + 1] : typeof ax.dtick === "number" ? 2 * ax.dtick : "D2";
        if (next === undefined) next = 2 * LOG_STEPS[LOG_STEPS.length - 1];
        update[key + ".dtick"] = next;
        if (typeof next === "number") update[key + ".tick0"] = 0;
      } else if (ax.type === "linear" || ax.type === "-") {
        update[key + ".nticks"] = Math.max(2, Math.floor(labels.length / 2));
      }
    });
    if (Object.keys(update).length) window.Plotly.relayout(gd, update);
  }

  function text(title) {
    if (!title) return "";
    return typeof title === "string" ? title : (title.text || "");
  }

  var resizeTimer = null;
  window.addEventListener("resize", function () {
    clearTimeout(resizeTimer);
    resizeTimer = setTimeout(function () {
      Array.prototype.forEach.call(document.querySelectorAll(".dpclip-figure-scroll .plotly-graph-div"), stackPanels);
    }, 200);
  });

  /* A figure drawn while its column had another width (the page still laying out, a sidebar
   * opening) keeps that width: plotly follows the window, not the column. A reader at 1280 px
   * saw a figure's right panel and slider labels cut at its edge. Each figure follows its box. */
  function followBox(gd) {
    if (gd.dataset.dpclipFollow || !window.ResizeObserver || !window.Plotly) return;
    gd.dataset.dpclipFollow = "1";
    var timer = null;
    new ResizeObserver(function () {
      clearTimeout(timer);
      timer = setTimeout(function () {
        var fl = gd._fullLayout;
        if (fl && Math.abs(fl.width - gd.clientWidth) > 1 && gd.clientWidth > 0) window.Plotly.Plots.resize(gd);
      }, 100);
    }).observe(gd);
  }

  function setUp(gd) {
    followBox(gd);
    if (gd._fullData && !gd.dataset.dpclipStackChecked) { gd.dataset.dpclipStackChecked = "1"; stackPanels(gd); }
    if (gd._fullData) { keyboardSlider(gd); buildLegend(gd); fitTitles(gd); thinTicks(gd); }
    if (gd.on && !gd.dataset.dpclipHooked) {
      gd.dataset.dpclipHooked = "1";
      gd.on("plotly_afterplot", function () { keyboardSlider(gd); buildLegend(gd); fitTitles(gd); thinTicks(gd); });
    }
  }

  function scan() {
    Array.prototype.forEach.call(document.querySelectorAll(".plotly-graph-div"), setUp);
  }

  window.dpclipFigures = {scan: scan, legendItems: legendItems, goToStep: goToStep, stackPanels: stackPanels, fitTitles: fitTitles, thinTicks: thinTicks};
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", scan);
  else scan();
  window.addEventListener("load", scan);
})();
