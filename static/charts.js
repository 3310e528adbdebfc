// Draws every figure the server built: each [data-figure] element holds a Plotly figure as JSON.
(function () {
  "use strict";
  function draw(el) {
    var fig = JSON.parse(el.getAttribute("data-figure"));
    var layout = fig.layout || {};
    // Titles start at the left: Plotly's toolbar sits at the top right and covered centred ones.
    if (layout.title) { layout.title = Object.assign({ x: 0.01, xanchor: "left" }, layout.title); }
    // On a narrow screen a horizontal legend wraps onto many rows and squeezes the plot: give
    // the figure the height its legend takes.
    if (el.clientWidth < 600 && layout.showlegend !== false) {
      var entries = fig.data.filter(function (t) { return t.showlegend !== false; }).length;
      layout.height = (layout.height || 400) + 24 * Math.ceil(entries / 2);
    }
    fig.layout = layout;
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
