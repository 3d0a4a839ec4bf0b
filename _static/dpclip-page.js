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
  function fit() { fitInlineMath(); focusableWideDisplays(); nameToggles(); scrollCues(); }
  function later() { clearTimeout(timer); timer = setTimeout(fit, 150); }
  function start() {
    var mj = window.MathJax;
    if (mj && mj.startup && mj.startup.promise) mj.startup.promise.then(fit);
    else fit();
  }
  window.dpclipPage = {fitInlineMath: fitInlineMath, fit: fit};
  window.addEventListener("load", start);
  window.addEventListener("resize", later);
  new MutationObserver(focusableWideDisplays).observe(document.documentElement, {attributes: true, attributeFilter: ["data-theme"]});
})();
