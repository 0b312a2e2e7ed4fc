// Tidelog console: live charts only. Every page works without this file; it draws small
// SVG line charts from a JSON endpoint fed by the broker's own metrics registry.
"use strict";
(function () {
  const HISTORY = 60;           // points kept per chart (2 minutes at 2 s)
  const PERIOD_MS = 2000;

  function draw(svg, points) {
    const w = 300, h = 90;
    svg.setAttribute("viewBox", "0 0 " + w + " " + h);
    const max = Math.max(1, ...points);
    const step = points.length > 1 ? w / (HISTORY - 1) : 0;
    const coords = points.map((v, i) => (i * step).toFixed(1) + "," + (h - 4 - (v / max) * (h - 8)).toFixed(1));
    let line = svg.querySelector("polyline");
    if (!line) {
      line = document.createElementNS("http://www.w3.org/2000/svg", "polyline");
      svg.appendChild(line);
    }
    line.setAttribute("points", coords.join(" "));
  }

  function start(root) {
    const source = root.dataset.source;
    const charts = Array.from(root.querySelectorAll("[data-series]"));
    const state = new Map(charts.map((c) => [c, { last: null, points: [] }]));
    async function tick() {
      let data;
      try {
        const reply = await fetch(source, { credentials: "same-origin", headers: { Accept: "application/json" } });
        if (!reply.ok) return;
        data = await reply.json();
      } catch (e) {
        return;  // the broker went away: try again at the next tick
      }
      for (const chart of charts) {
        const s = state.get(chart);
        const raw = data.values[chart.dataset.series];
        if (raw === undefined) continue;
        let value = raw;
        if (chart.dataset.kind === "rate") {
          value = s.last === null ? 0 : Math.max(0, (raw - s.last.v) / ((data.t - s.last.t) || 1));
          s.last = { v: raw, t: data.t };
        }
        s.points.push(value);
        if (s.points.length > HISTORY) s.points.shift();
        draw(chart.querySelector("svg"), s.points);
        chart.querySelector(".now").textContent = (Math.round(value * 10) / 10).toLocaleString() + (chart.dataset.unit || "");
      }
    }
    tick();
    setInterval(tick, PERIOD_MS);
  }

  document.addEventListener("DOMContentLoaded", function () {
    document.querySelectorAll("[data-source]").forEach(start);
  });
})();
