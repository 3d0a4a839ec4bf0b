/*
 * dpclip-lab: ipywidgets' HTML manager (embed-amd.js) typesets widget labels with
 * the MathJax 2 API, MathJax.Hub.Queue(["Typeset", MathJax.Hub, element]).
 * The book serves MathJax 4 (_static/mathjax/), which has no Hub, so each
 * widget threw "Cannot read properties of undefined (reading 'Queue')".
 * This forwards those calls to MathJax 4's typesetPromise. MIT licensed.
 */
(function () {
  "use strict";
  var hub = {
    Queue: function (cmd) {
      var MJ = window.MathJax;
      var el = Array.isArray(cmd) && cmd[0] === "Typeset" ? cmd[2] : null;
      if (!el || !MJ || !MJ.startup || !MJ.startup.promise) return;
      MJ.startup.promise.then(function () {
        return MJ.typesetPromise ? MJ.typesetPromise([el]) : null;
      }).catch(function (err) { console.warn("MathJax typeset of a widget failed", err); });
    }
  };
  function install() {
    if (window.MathJax && !window.MathJax.Hub) window.MathJax.Hub = hub;
  }
  install();
  document.addEventListener("DOMContentLoaded", install);
  window.addEventListener("load", install);
})();
