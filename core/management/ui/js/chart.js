// A line chart on a <canvas>: one line per series over the last samples, the y axis from
// zero to a round maximum. The legend (with the latest values) is text beside it.

import { h, replace } from "./dom.js";

// The same colours as `.swatch.c0` to `.c4` in style.css (the page allows no inline styles).
const COLOURS = ["#2f6fb0", "#d9822b", "#3a9a5b", "#b5425f", "#7a5cb8"];

export function lineChart(title, unit) {
  const canvas = h("canvas", { width: 560, height: 200, role: "img", "aria-label": title });
  const legend = h("ul", { class: "legend" });
  const element = h("figure", { class: "chart" }, h("figcaption", {}, title), canvas, legend);

  function draw(series, format) {
    replace(legend, series.map((one, index) => h("li", {},
      h("span", { class: `swatch c${index}` }), `${one.label}: `,
      h("strong", {}, format(one.values.at(-1) ?? 0)))));
    paint(canvas, series, unit);
  }
  return { element, draw };
}

function niceMaximum(value) {
  if (value <= 0) return 1;
  const power = 10 ** Math.floor(Math.log10(value));
  return [1, 2, 5, 10].map((step) => step * power).find((candidate) => candidate >= value);
}

function paint(canvas, series, unit) {
  const ratio = window.devicePixelRatio || 1;
  const width = canvas.clientWidth || canvas.width;
  const height = canvas.clientHeight || canvas.height;
  canvas.width = width * ratio;
  canvas.height = height * ratio;
  const context = canvas.getContext("2d");
  context.scale(ratio, ratio);
  context.clearRect(0, 0, width, height);
  const left = 56;
  const top = 8;
  const plotWidth = width - left - 8;
  const plotHeight = height - top - 20;
  const samples = Math.max(2, ...series.map((one) => one.values.length));
  const maximum = niceMaximum(Math.max(0, ...series.flatMap((one) => one.values)));

  context.font = "11px system-ui, sans-serif";
  context.fillStyle = "#666";
  context.strokeStyle = "#ddd";
  context.lineWidth = 1;
  for (let step = 0; step <= 4; step += 1) {
    const y = top + plotHeight - (plotHeight * step) / 4;
    context.beginPath();
    context.moveTo(left, y);
    context.lineTo(left + plotWidth, y);
    context.stroke();
    const label = (maximum * step) / 4;
    context.fillText(`${Number.isInteger(label) ? label : label.toFixed(1)}${unit}`, 4, y + 4);
  }
  context.fillText("now", left + plotWidth - 20, height - 4);
  series.forEach((one, index) => {
    context.strokeStyle = COLOURS[index % COLOURS.length];
    context.lineWidth = 2;
    context.beginPath();
    one.values.forEach((value, at) => {
      const x = left + (plotWidth * (samples - one.values.length + at)) / (samples - 1);
      const y = top + plotHeight - (plotHeight * value) / maximum;
      if (at === 0) context.moveTo(x, y);
      else context.lineTo(x, y);
    });
    context.stroke();
  });
}
