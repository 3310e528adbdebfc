// Draws every figure the server built: each [data-figure] element holds a Plotly figure as JSON.
(function () {
  "use strict";
  function draw(el) {
    var fig = JSON.parse(el.getAttribute("data-figure"));
    Plotly.newPlot(el, fig.data, fig.layout, { displaylogo: false, responsive: true });
    if (fig.meta && fig.meta.links) {
      // A point that carries its source's link (customdata) opens it on click.
      el.on("plotly_click", function (event) {
        var url = event.points.length ? event.points[0].customdata : "";
        if (url) { window.open(url, "_blank", "noopener"); }
      });
    }
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
