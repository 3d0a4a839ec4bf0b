/* dpclip-lab: on every page of the book.
 *
 * MathJax 4 breaks formulas at the width of their column (_config.yml). A formula in running
 * text that still has no place to break (one long root or fraction) scrolls sideways in its own
 * box instead of pushing the page wider than a phone's screen or out of a theorem box. It gets
 * a tab stop so that a keyboard can scroll it too, and a shade at the edge where more of it lies.
 * (The book's check, tests/test_book_html.py, wants no formula to need this; it is the fallback.)
 */
(function () {
  "use strict";
  function fitInlineMath() {
    var all = document.querySelectorAll('mjx-container:not([display="true"])');
    Array.prototype.forEach.call(all, function (c) {
      c.classList.remove("dpclip-wide-math");
      var host = c.parentElement;
      if (!host) return;
      var room = host.getBoundingClientRect().right;
      var box = c.closest("div.proof, div.admonition, aside.admonition");
      if (box) room = Math.min(room, box.getBoundingClientRect().right);
      room = Math.min(room, document.documentElement.clientWidth);
      if (c.getBoundingClientRect().right > room + 1) {
        c.classList.add("dpclip-wide-math");
        c.setAttribute("tabindex", "0");
      } else if (c.classList.contains("dpclip-wide-math") === false && c.getAttribute("tabindex") === "0") {
        c.removeAttribute("tabindex");
      }
    });
  }
  // a displayed formula or a cell's output (a wide table) wider than the column scrolls in its
  // box: a keyboard must reach it (WCAG 2.1.1; axe scrollable-region-focusable). Re-checked when
  // the width or the colour mode changes (the dark mode pads outputs, which can make one scroll).
  function focusableWideDisplays() {
    var all = document.querySelectorAll('mjx-container[display="true"], div.cell_output > .output');
    Array.prototype.forEach.call(all, function (c) {
      var focusable = c.querySelector("a[href], button, input, select, textarea, [tabindex=\"0\"]");
      // (the theme marks the outputs that scrolled at load tabindex="0" and the others "-1")
      // any overflow at all, as axe counts it (a formula one pixel wider than its box in dark mode)
      if (c.scrollWidth > c.clientWidth && !focusable) {
        if (c.getAttribute("tabindex") !== "0") {
          c.dataset.dpclipTabindex = c.getAttribute("tabindex") || "";
          c.setAttribute("tabindex", "0");
        }
      } else if (c.dataset.dpclipTabindex !== undefined) {
        if (c.dataset.dpclipTabindex) c.setAttribute("tabindex", c.dataset.dpclipTabindex);
        else c.removeAttribute("tabindex");
        delete c.dataset.dpclipTabindex;
      }
    });
  }
  var timer = null;
  // the sidebar's expand/collapse toggles are <summary> elements with only an icon: name them
  function nameToggles() {
    Array.prototype.forEach.call(document.querySelectorAll("summary"), function (s) {
      if (!s.textContent.trim() && !s.getAttribute("aria-label")) s.setAttribute("aria-label", "Show or hide the pages under this entry");
    });
  }
  // a formula or a table that scrolls sideways says so: a shade at the edge where more of it lies
  // (dpclip-more-right / dpclip-more-left, _static/dpclip.css), updated as it scrolls
  function scrollCue(c) {
    var more = c.scrollWidth > c.clientWidth + 1;
    c.classList.toggle("dpclip-more-right", more && c.scrollLeft + c.clientWidth < c.scrollWidth - 1);
    c.classList.toggle("dpclip-more-left", more && c.scrollLeft > 1);
  }
  function scrollCues() {
    var all = document.querySelectorAll('mjx-container[display="true"], mjx-container.dpclip-wide-math, ' +
                                        'div.cell_output > .output, div.pst-scrollable-table-container');
    Array.prototype.forEach.call(all, function (c) {
      scrollCue(c);
      if (!c.dataset.dpclipCue) {
        c.dataset.dpclipCue = "1";
        c.addEventListener("scroll", function () { scrollCue(c); }, {passive: true});
      }
    });
  }
  // a table wider than its column (a phone) would hide its right-hand columns behind a sideways
  // scroll: it is set as one block per row instead, each value after its column's name
  // (dpclip-stacked, _static/dpclip.css); the roles keep it a table for a screen reader
  function stackWideTables() {
    var all = document.querySelectorAll("article table, main table");
    Array.prototype.forEach.call(all, function (t) {
      t.classList.remove("dpclip-stacked");
      var host = t.parentElement;
      if (!host || t.getBoundingClientRect().width === 0) return;
      if (t.scrollWidth <= host.clientWidth + 1 && t.getBoundingClientRect().width <= host.clientWidth + 1) return;
      if (!t.dataset.dpclipLabelled) {
        t.dataset.dpclipLabelled = "1";
        var head = t.tHead && t.tHead.rows.length ? t.tHead.rows[t.tHead.rows.length - 1] : null;
        var names = head ? Array.prototype.map.call(head.cells, function (c) { return c.textContent.trim(); }) : [];
        t.setAttribute("role", "table");
        Array.prototype.forEach.call(t.querySelectorAll("thead, tbody, tfoot"), function (g) { g.setAttribute("role", "rowgroup"); });
        Array.prototype.forEach.call(t.rows, function (r) {
          r.setAttribute("role", "row");
          var k = 0;
          Array.prototype.forEach.call(r.cells, function (c) {
            var inHead = r.parentElement && r.parentElement.tagName === "THEAD";
            c.setAttribute("role", inHead ? "columnheader" : (c.tagName === "TH" ? "rowheader" : "cell"));
            if (!inHead && names[k]) c.setAttribute("data-label", names[k]);
            k += c.colSpan || 1;
          });
        });
      }
      t.classList.add("dpclip-stacked");
    });
  }
  // punctuation after a formula in running text stays on the formula's line (a line that starts
  // with ", the feedback…" or ". The lab's…"): the formula and the marks that follow it are one
  // unit for line breaking (dpclip-nobreak, _static/dpclip.css); breaks inside the formula remain
  function gluePunctuation() {
    var all = document.querySelectorAll('mjx-container:not([display="true"])');
    Array.prototype.forEach.call(all, function (c) {
      // Sphinx writes inline math as <span class="math">\(…\)</span>: MathJax's output sits inside it
      var unit = c.parentElement && c.parentElement.matches("span.math") ? c.parentElement : c;
      var next = unit.nextSibling;
      if (!next || next.nodeType !== 3 || (unit.parentElement && unit.parentElement.classList.contains("dpclip-nobreak"))) return;
      var m = /^[,.;:!?)\]\u2019\u201d]+/.exec(next.data);
      if (!m) return;
      if (next.data.length > m[0].length) next.splitText(m[0].length);
      var span = document.createElement("span");
      span.className = "dpclip-nobreak";
      unit.parentNode.insertBefore(span, unit);
      span.appendChild(unit);
      span.appendChild(next);
    });
  }
  function fit() { gluePunctuation(); fitInlineMath(); stackWideTables(); focusableWideDisplays(); nameToggles(); scrollCues(); }
  function later() { clearTimeout(timer); timer = setTimeout(fit, 150); }
  function start() {
    var mj = window.MathJax;
    if (mj && mj.startup && mj.startup.promise) mj.startup.promise.then(fit);
    else fit();
  }
  window.dpclipPage = {fitInlineMath: fitInlineMath, stackWideTables: stackWideTables, fit: fit};
  window.addEventListener("load", start);
  window.addEventListener("resize", later);
  // a folded "Show the numbers" table is measured when it opens
  document.addEventListener("toggle", function (e) { if (e.target.open) stackWideTables(); }, true);
  new MutationObserver(focusableWideDisplays).observe(document.documentElement, {attributes: true, attributeFilter: ["data-theme"]});
})();
