// Draws every figure the server built: each [data-figure] element holds a Plotly figure as JSON.
(function () {
  "use strict";
  function draw(el) {
    var fig = JSON.parse(el.getAttribute("data-figure"));
    Plotly.newPlot(el, fig.data, fig.layout, { displaylogo: false, responsive: true });
  }
  function drawAll() {
    if (typeof Plotly === "undefined") { return; }
    document.querySelectorAll("[data-figure]").forEach(draw);
  }
  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", drawAll);
  } else {
    drawAll();
  }
})();
