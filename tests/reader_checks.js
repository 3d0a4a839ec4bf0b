// What a reader meets on a page of the built book, measured in the browser
// (tests/test_book_html.py runs it with Playwright on every page at 1280 and 400 px).
// Each check returns a list of problems in words: an empty list is a pass.
//
//   window.dpclipReader.page()            -> {scrollWidth, clientWidth, wide: [...], clipped: [...], sideways: [...], squeezed: [...]}
//   await window.dpclipReader.figures(o)  -> [{id, problems: [...], steps}]
//       o.allSteps: move every slider through every step (blank-frame check at each);
//       otherwise only the first, active and last steps.
(() => {
  const PAD = 1.5;  // px of tolerance for anti-aliased edges
  const MIN_PLOT = 120;  // px: the narrowest plot area (and half of it the lowest) a reader can read data in
  const MIN_INSIDE = 0.2;  // share of a subplot's points that must lie inside its axes (a zoom may cut tails)
  const MIN_CURVE_INSIDE = 0.5;  // share of a named curve's points inside its axes: most of what it names is drawn

  const describe = (el) => {
    const cls = (el.getAttribute && el.getAttribute("class")) || "";
    const text = (el.textContent || "").replace(/\s+/g, " ").trim().slice(0, 60);
    return `<${el.tagName.toLowerCase()}${cls ? " class=\"" + cls.slice(0, 40) + "\"" : ""}> "${text}"`;
  };

  // An element that scrolls sideways on its own (a wide table or equation in its box) is
  // fine on a phone: the page does not scroll. Anything else sticking out is a defect.
  const scrollsInside = (el, stop) => {
    for (let a = el.parentElement; a && a !== stop && a !== document.body; a = a.parentElement) {
      const ox = getComputedStyle(a).overflowX;
      if ((ox === "auto" || ox === "scroll") && a.scrollWidth > a.clientWidth - 1) return true;
    }
    return false;
  };

  function page() {
    const W = document.documentElement.clientWidth;
    const wide = [];
    const main = document.querySelector("main, article, .bd-article") || document.body;
    for (const el of main.querySelectorAll("*")) {
      const r = el.getBoundingClientRect();
      if (r.width === 0 || r.right <= W + PAD) continue;
      if (el.closest(".js-plotly-plot") && !el.classList.contains("js-plotly-plot")) continue;
      if (el.closest("mjx-assistive-mml")) continue;   // MathML for screen readers: clipped, never shown
      if (scrollsInside(el, null)) continue;
      if (getComputedStyle(el).position === "fixed") continue;
      wide.push(`${describe(el)} reaches x = ${Math.round(r.right)} px`);
      if (wide.length > 8) break;
    }
    // theorem / algorithm / admonition boxes: nothing cut off at the box's edge
    const clipped = [];
    for (const box of document.querySelectorAll("div.proof, div.admonition, aside.admonition")) {
      const b = box.getBoundingClientRect();
      if (b.width === 0) continue;
      for (const el of box.querySelectorAll("*")) {
        if (el.closest("mjx-assistive-mml")) continue;
        const r = el.getBoundingClientRect();
        if (r.width === 0 || r.right <= b.right + PAD) continue;
        if (scrollsInside(el, box)) continue;
        clipped.push(`${describe(el)} sticks out of ${describe(box).slice(0, 80)} by ${Math.round(r.right - b.right)} px`);
        break;
      }
    }
    // what a reader sees only by scrolling a box sideways: a formula, a figure or a table (a fifth
    // reading met tables whose right-hand columns, the ones the text quoted, were off a phone's
    // screen). Each box is named once, by what it holds.
    const sideways = [];
    for (const el of main.querySelectorAll("*")) {
      const ox = getComputedStyle(el).overflowX;
      if (!(ox === "auto" || ox === "scroll") || el.scrollWidth <= el.clientWidth + 2) continue;
      if (el.closest("mjx-assistive-mml") || el.getBoundingClientRect().width === 0) continue;
      const kind = el.matches("mjx-container") || el.querySelector(":scope > mjx-container, :scope > .math, mjx-container[display='true']")
        ? "formula" : el.querySelector(".js-plotly-plot, .plotly-graph-div") ? "figure" : el.querySelector("table") || el.matches("table") ? "table" : "other";
      if (sideways.some((s) => s.el.contains(el))) continue;
      const cue = /dpclip-more-(right|left)/.test(el.className || "") ? "" : " (no scroll cue)";
      sideways.push({el, text: `${kind}: ${describe(el)} needs ${el.scrollWidth} px of ${el.clientWidth}${cue}`, kind});
    }
    // a displayed formula that MathJax broke into lines although it had room: its widest line under
    // half its column (the theme's flex "div.math" once gave MathJax 4 a column one symbol wide)
    const squeezed = [];
    for (const c of main.querySelectorAll('mjx-container[display="true"]')) {
      const lines = c.querySelectorAll("mjx-linebox").length, m = c.querySelector("mjx-math");
      if (lines < 2 || !m || c.clientWidth === 0) continue;
      const w = m.getBoundingClientRect().width;
      if (w < 0.5 * c.clientWidth) squeezed.push(`${describe(c)} broken into ${lines} lines ${Math.round(w)} px wide in a ${c.clientWidth} px column`);
    }
    // a line that starts with the punctuation closing a formula (", the feedback…" after $e_t$)
    const orphans = [];
    for (const c of main.querySelectorAll('mjx-container:not([display="true"])')) {
      if (c.closest("mjx-assistive-mml")) continue;
      // Sphinx writes inline math as <span class="math">\(…\)</span>, MathJax's output inside it
      const unit = c.parentElement && c.parentElement.matches("span.math") ? c.parentElement : c;
      const next = unit.nextSibling;
      if (!next || next.nodeType !== 3 || !/^[,.;:!?)\]]/.test(next.data)) continue;
      const boxes = c.getClientRects();
      if (!boxes.length) continue;
      const last = boxes[boxes.length - 1], r = document.createRange();
      r.setStart(next, 0); r.setEnd(next, 1);
      const ch = r.getBoundingClientRect();
      if (ch.height > 0 && ch.top >= last.bottom - 2) orphans.push(`"${next.data.slice(0, 20)}" starts a line after ${describe(c).slice(0, 60)}`);
    }
    // a table caption squeezed into a column a word or two wide (a stacked table on a phone)
    for (const cap of main.querySelectorAll("table caption")) {
      const t = cap.closest("table"), w = cap.getBoundingClientRect().width, tw = t.getBoundingClientRect().width;
      if (cap.textContent.trim().length > 20 && tw > 0 && w < 0.5 * tw) clipped.push(`caption "${cap.textContent.trim().slice(0, 40)}" squeezed to ${Math.round(w)} px of its table's ${Math.round(tw)}`);
    }
    // markup a reader sees as text ("G = ‖g<sub>1</sub>‖" under a slider, written by a script)
    const markup = [], prose = main.cloneNode(true);
    prose.querySelectorAll("pre, code, .highlight, script, style, mjx-assistive-mml").forEach((e) => e.remove());
    for (const m of (prose.textContent || "").replace(/\s+/g, " ").matchAll(/.{0,30}<\/?(sub|sup|b|i|em|br|span|div)\b[^>]{0,40}>.{0,30}/g)) markup.push(m[0]);
    return {scrollWidth: document.documentElement.scrollWidth, clientWidth: W, wide, clipped,
            sideways: sideways.map((s) => s.text), squeezed, markup, orphans};
  }

  // ---------------------------------------------------------------- figures
  const rect = (el) => { const r = el.getBoundingClientRect(); return {l: r.left, t: r.top, r: r.right, b: r.bottom, w: r.width, h: r.height}; };
  const overlap = (a, b) => Math.min(a.r, b.r) - Math.max(a.l, b.l) > PAD && Math.min(a.b, b.b) - Math.max(a.t, b.t) > PAD;
  const usable = (r) => r && r.w > 0 && r.h > 0;

  function plotAreas(gd) {
    const fl = gd._fullLayout, g = gd.getBoundingClientRect(), out = [];
    for (const [name, p] of Object.entries(fl._plots || {})) {
      const xa = p.xaxis, ya = p.yaxis;
      if (!xa || !ya || xa.visible === false && ya.visible === false) continue;
      const l = g.left + xa._offset, t = g.top + ya._offset;
      out.push({name, box: {l, t, r: l + xa._length, b: t + ya._length, w: xa._length, h: ya._length}});
    }
    return out;
  }

  // The parts of a figure that must not sit on one another.
  function parts(gd) {
    const q = (sel) => Array.from(gd.querySelectorAll(sel)).filter((e) => usable(rect(e)));
    const legend = q(".infolayer .legend .bg").map((e) => ({what: "legend", box: rect(e)}));
    const slider = q(".slider-container").map((e) => ({what: "slider", box: rect(e)}));
    const title = q(".infolayer .g-gtitle text").map((e) => ({what: `title "${e.textContent.slice(0, 30)}"`, box: rect(e)}));
    const axisTitles = q(".infolayer [class*=title] text.xtitle, .infolayer [class*=title] text.ytitle, .infolayer text[class$=title]")
      .filter((e) => /^[xy]\d*title$/.test(e.getAttribute("class") || ""))
      .map((e) => ({what: `axis title "${e.textContent.slice(0, 30)}"`, box: rect(e)}));
    // annotations in paper coordinates without an arrow: subplot titles and notes
    const anns = (gd._fullLayout.annotations || []);
    const annEls = q(".annotation");
    const notes = [];
    annEls.forEach((e) => {
      const i = Number(e.getAttribute("data-index"));
      const a = anns[i];
      if (!a || a.showarrow || a.xref !== "paper" || a.yref !== "paper") return;
      const t = e.querySelector(".annotation-text-g") || e;
      notes.push({what: `annotation "${(e.textContent || "").slice(0, 30)}"`, box: rect(t)});
    });
    return {legend, slider, title, axisTitles, notes, plots: plotAreas(gd).map((p) => ({what: `plot area ${p.name}`, box: p.box}))};
  }

  function overlaps(gd) {
    const p = parts(gd), problems = [];
    const pairs = (A, B, why) => {
      for (const a of A) for (const b of B) if (a !== b && overlap(a.box, b.box)) problems.push(`${a.what} overlaps ${b.what}${why ? " (" + why + ")" : ""}`);
    };
    pairs(p.legend, p.slider);
    pairs(p.legend, p.plots, "legend on the data");
    pairs(p.legend, p.title.concat(p.axisTitles, p.notes));
    pairs(p.slider, p.plots.concat(p.axisTitles, p.title, p.notes));
    pairs(p.title, p.notes.concat(p.plots));
    pairs(p.axisTitles, p.plots, "axis title on the data");
    for (let i = 0; i < p.notes.length; i++) pairs([p.notes[i]], p.notes.slice(i + 1));
    for (let i = 0; i < p.axisTitles.length; i++) pairs([p.axisTitles[i]], p.axisTitles.slice(i + 1));
    pairs(p.axisTitles, p.notes.concat(p.title), "an axis title on a title");
    // a panel leaves room for its data (long category labels once squeezed a bar chart to 10 px)
    for (const a of p.plots) {
      if (a.box.w < MIN_PLOT || a.box.h < MIN_PLOT / 2) problems.push(`${a.what} is ${Math.round(a.box.w)} × ${Math.round(a.box.h)} px: no room for its data`);
    }
    // the tick labels of one axis stand apart (a log axis with its 2 and 5 labels on a short panel)
    gd.querySelectorAll(".xaxislayer-above, .yaxislayer-above").forEach((layer) => {
      const ticks = Array.from(layer.querySelectorAll("text")).filter((e) => usable(rect(e)) && e.textContent.trim())
        .map((e) => ({what: `tick label "${e.textContent.slice(0, 12)}"`, box: rect(e)}));
      for (let i = 0; i < ticks.length; i++) pairs([ticks[i]], ticks.slice(i + 1), "tick labels on each other");
      // a number as the book writes it: plotly's "power" labels read "2x10" for 20 (the exponent 1 left out)
      for (const e of layer.querySelectorAll("text")) {
        if (/^\s*\d+(\.\d+)?\s*[x×]\s*10\s*$/.test(e.textContent)) problems.push(`tick label "${e.textContent.trim()}" (20 written as 2×10)`);
      }
    });
    // the figure itself stays inside the page column
    const g = rect(gd), W = document.documentElement.clientWidth;
    // titles and notes are drawn whole, not cut at the figure's edge (plotly does not wrap them)
    const stepLabels = Array.from(gd.querySelectorAll(".slider-container .slider-label-group text, .slider-container text.slider-label"))
      .filter((e) => usable(rect(e))).map((e) => ({what: `slider label "${e.textContent.slice(0, 20)}"`, box: rect(e)}));
    for (const t of p.title.concat(p.notes, p.axisTitles, stepLabels)) {
      if (t.box.l < g.l - PAD || t.box.r > g.r + PAD) problems.push(`${t.what} is cut at the figure's edge`);
    }
    if (g.r > W + PAD && !scrollsInside(gd, null)) problems.push(`the figure is ${Math.round(g.w)} px wide and reaches x = ${Math.round(g.r)} px on a ${W} px page`);
    return problems;
  }

  // Visible data inside the plot area: for every visible trace that has data in this frame,
  // at least one point lies inside the axis ranges (plotly does not autorange while animating).
  const toAxis = (ax, v) => {
    if (v === null || v === undefined || v === "") return NaN;
    if (ax.type === "log") return v > 0 ? Math.log10(v) : NaN;
    if (ax.type === "category" || ax.type === "multicategory") return NaN;
    if (ax.type === "date") return ax.d2l ? ax.d2l(v) : NaN;
    return Number(v);
  };
  const within = (ax, v) => { const [a, b] = ax.range; const lo = Math.min(a, b), hi = Math.max(a, b); return v >= lo - 1e-9 * (hi - lo) && v <= hi + 1e-9 * (hi - lo); };
  const arr = (x) => (x && x.length !== undefined ? Array.from(x) : []);

  function blankTraces(gd) {
    const fl = gd._fullLayout, problems = [];
    const bySubplot = {};
    gd._fullData.forEach((tr, i) => {
      if (tr.visible !== true) return;
      if (!["scatter", "scattergl", "bar"].includes(tr.type)) return;
      const xa = fl[(tr.xaxis || "x").replace(/^x/, "xaxis")], ya = fl[(tr.yaxis || "y").replace(/^y/, "yaxis")];
      if (!xa || !ya || xa.type === "category" || ya.type === "category") return;
      const xs = arr(tr.x), ys = arr(tr.y);   // fullData: base64 arrays decoded
      const n = Math.max(xs.length, ys.length);
      let finite = 0, inside = 0;
      for (let k = 0; k < n; k++) {
        const x = xs.length ? toAxis(xa, xs[k]) : toAxis(xa, k), y = ys.length ? toAxis(ya, ys[k]) : toAxis(ya, k);
        if (!Number.isFinite(x) || !Number.isFinite(y)) continue;
        finite++;
        if (tr.type === "bar") {
          const base = ya.type === "log" ? ya.range[0] : 0;
          const lo = Math.min(base, y), hi = Math.max(base, y), [r0, r1] = ya.range;
          if (within(xa, x) && hi >= Math.min(r0, r1) && lo <= Math.max(r0, r1)) inside++;
        } else if (within(xa, x) && within(ya, y)) inside++;
      }
      // a named curve mostly outside its axes: the legend promises it and the panel shows a stub
      // (#28's fourth reading: a bound 10⁻¹¹ under an axis that stops at 10⁻⁸; two descents that
      // leave the top of their panel where the difference between them is drawn)
      // (a guide drawn for orientation, hover "skip", is exempt: the circle ‖g‖ = C lies outside a
      // view zoomed on the bulk of the gradients exactly when nothing in view is clipped)
      if (tr.type !== "bar" && tr.name && tr.hoverinfo !== "skip" && finite >= 3 && inside < MIN_CURVE_INSIDE * finite) {
        problems.push(`curve "${String(tr.name).replace(/<[^>]+>/g, "").slice(0, 40)}" lies mostly outside its axes: ${inside} of its ${finite} points inside`);
      }
      const key = `${tr.xaxis || "x"}${tr.yaxis || "y"}`;
      bySubplot[key] = bySubplot[key] || {finite: 0, inside: 0};
      bySubplot[key].finite += finite; bySubplot[key].inside += inside;
    });
    // a subplot is (nearly) blank when most of its data fall outside its axes: plotly does not
    // rescale while animating, so a frame drawn on another frame's ranges shows a few stray points
    for (const [k, v] of Object.entries(bySubplot)) {
      if (v.finite > 0 && v.inside < MIN_INSIDE * v.finite) {
        problems.push(`subplot ${k} is (nearly) blank: ${v.inside} of its ${v.finite} points lie inside its axes`);
      }
    }
    return problems;
  }

  // The HTML legend (_static/dpclip-figures.js) names every curve the figure names: each visible
  // trace (or legend group) with a name and showlegend not false has an entry.
  function legendGaps(gd) {
    const meta = (gd.layout && gd.layout.meta) || {};
    if (!("dpclip_legend" in meta) || meta.dpclip_legend === false) return [];
    const want = new Map();
    gd._fullData.forEach((tr) => {
      if (tr.visible === false || tr.showlegend === false || !tr.name) return;
      const key = "n:" + tr.name;   // every name the figure shows in its legend, grouped or not
      if (!want.has(key)) want.set(key, tr.name);
    });
    if (want.size < (meta.dpclip_legend === true ? 1 : 2)) return [];
    const fig = gd.closest("figure") || gd.parentNode.parentNode;
    const shown = new Set(Array.from(fig.querySelectorAll(".dpclip-legend-item")).map((b) => b.textContent.trim()));
    const plain = (t) => String(t).replace(/<[^>]+>/g, "").trim();
    return [...want.values()].filter((n) => !shown.has(plain(n))).map((n) => `the legend has no entry for "${plain(n).slice(0, 40)}"`);
  }

  // Hover: values a reader may want to read are readable.
  function hover(gd) {
    const fl = gd._fullLayout, problems = [];
    if (fl.hovermode === false) return ["hovermode is off: no value can be read by pointing"];
    const namelength = fl.hoverlabel && fl.hoverlabel.namelength;
    let anyHover = false;
    gd._fullData.forEach((tr, i) => {
      if (tr.visible !== true) return;
      const info = tr.hoverinfo || "";
      const fill = tr.fill && tr.fill !== "none";
      if (fill && (tr.mode || "").includes("markers")) problems.push(`band trace "${tr.name}" draws markers at its corners (mode ${tr.mode})`);
      if (info === "skip" || info === "none") return;
      anyHover = true;
      const tmpl = tr.hovertemplate || "";
      const showsName = tmpl ? !/<extra><\/extra>/.test(tmpl) : (info === "all" || info.includes("name"));
      if (!showsName) return;
      const name = tr.name || "";
      if (/^trace \d+$/.test(name) || name === "") problems.push(`trace #${i} shows hover with no name ("trace ${i}")`);
      else if (namelength !== -1 && name.length > (namelength ?? 15)) problems.push(`hover label cuts "${name}" to ${namelength ?? 15} characters`);
    });
    if (!anyHover && gd._fullData.some((t) => t.visible === true)) problems.push("no trace shows a value on hover");
    return problems;
  }

  const nextFrame = () => new Promise((r) => requestAnimationFrame(() => requestAnimationFrame(r)));

  async function goTo(gd, step) {
    const args = step.args || [];
    if (step.method === "animate") {
      await window.Plotly.animate(gd, args[0], Object.assign({}, args[1] || {}, {transition: {duration: 0}, frame: {duration: 0, redraw: true}, mode: "immediate"}));
    } else if (["restyle", "relayout", "update"].includes(step.method)) {
      await window.Plotly[step.method](gd, ...args);
    }
    await nextFrame();
  }

  async function figures(opts = {}) {
    const out = [];
    for (const gd of document.querySelectorAll(".js-plotly-plot")) {
      const fig = {id: gd.id, problems: [], steps: 0};
      const tag = (label) => (p) => fig.problems.push(`${label}: ${p}`);
      try {
        overlaps(gd).forEach(tag("as loaded"));
        blankTraces(gd).forEach(tag("as loaded"));
        hover(gd).forEach(tag("hover"));
        legendGaps(gd).forEach(tag("legend"));
        const slider = (gd._fullLayout.sliders || [])[0];
        if (slider && slider.steps && slider.steps.length > 1) {
          const steps = slider.steps, n = steps.length, active = slider.active || 0;
          const idx = opts.allSteps ? [...Array(n).keys()] : [...new Set([0, n - 1])];
          for (const k of idx) {
            await goTo(gd, steps[k]);
            fig.steps++;
            blankTraces(gd).forEach(tag(`slider at "${steps[k].label}"`));
          }
          await goTo(gd, steps[n - 1]);
          window.Plotly.relayout && await window.Plotly.relayout(gd, {"sliders[0].active": n - 1});
          await nextFrame();
          overlaps(gd).forEach(tag(`slider at its last step "${steps[n - 1].label}"`));
          await goTo(gd, steps[active]);
          await window.Plotly.relayout(gd, {"sliders[0].active": active});
        }
      } catch (e) {
        fig.problems.push(`the check itself failed: ${e}`);
      }
      fig.problems = [...new Set(fig.problems)];
      out.push(fig);
    }
    return out;
  }

  window.dpclipReader = {page, figures, overlaps, blankTraces, hover, legendGaps};
})();
