// The produce / consume rate chart: a hand-drawn SVG whose time axis is labelled in local time.

const SVG = "http://www.w3.org/2000/svg";
const HEIGHT = 180;
const MARGIN = { left: 48, right: 10, top: 10, bottom: 24 };

function svg(tag, attributes = {}, text = null) {
  const node = document.createElementNS(SVG, tag);
  for (const [name, value] of Object.entries(attributes)) node.setAttribute(name, String(value));
  if (text !== null) node.textContent = text;
  return node;
}

/** "HH:MM:SS" in the browser's time zone. */
export function clockTime(ms) {
  const date = new Date(ms);
  return [date.getHours(), date.getMinutes(), date.getSeconds()]
    .map((part) => String(part).padStart(2, "0"))
    .join(":");
}

function rateOf(samples, field, index) {
  const seconds = (samples[index].t - samples[index - 1].t) / 1000 || 1;
  return Math.max(0, (samples[index][field] - samples[index - 1][field]) / seconds);
}

function niceStep(span, target) {
  // The smallest of 1, 2, 5 x 10^n that cuts `span` into at most `target` parts.
  const rough = span / Math.max(1, target);
  const power = 10 ** Math.floor(Math.log10(rough || 1));
  for (const factor of [1, 2, 5, 10]) if (factor * power >= rough) return factor * power;
  return 10 * power;
}

/**
 * Draws into `container` the rates between consecutive `samples` ({t: ms since the epoch, stored,
 * consumed}) over the `windowMs` ending at `now`. Redrawn whole each time, at the container's width.
 */
export function drawRates(container, samples, windowMs, now = Date.now()) {
  const width = Math.max(200, container.clientWidth);
  const plotWidth = width - MARGIN.left - MARGIN.right;
  const plotHeight = HEIGHT - MARGIN.top - MARGIN.bottom;
  const start = now - windowMs;
  const x = (t) => MARGIN.left + ((t - start) / windowMs) * plotWidth;

  const series = { produce: [], consume: [] };
  for (let i = 1; i < samples.length; i++) {
    series.produce.push({ t: samples[i].t, rate: rateOf(samples, "stored", i) });
    series.consume.push({ t: samples[i].t, rate: rateOf(samples, "consumed", i) });
  }
  const peak = Math.max(1, ...series.produce.map((p) => p.rate), ...series.consume.map((p) => p.rate));
  const yStep = niceStep(peak, 3);
  const top = Math.ceil(peak / yStep) * yStep;
  const y = (rate) => MARGIN.top + plotHeight - (rate / top) * plotHeight;

  const chart = svg("svg", {
    width,
    height: HEIGHT,
    viewBox: `0 0 ${width} ${HEIGHT}`,
    role: "img",
    "aria-label": "messages per second produced and consumed, over the last minutes",
  });

  const yAxis = svg("g", { class: "y-axis" });
  for (let rate = 0; rate <= top + yStep / 2; rate += yStep) {
    yAxis.append(svg("line", { x1: MARGIN.left, x2: width - MARGIN.right, y1: y(rate), y2: y(rate), class: "grid" }));
    yAxis.append(svg("text", { x: MARGIN.left - 6, y: y(rate) + 4, "text-anchor": "end" }, `${rate}/s`));
  }
  chart.append(yAxis);

  // Ticks on round local times: every 15, 30 or 60 s, as many as the width has room for.
  const labelWidth = 64;
  const tickMs = [15_000, 30_000, 60_000, 120_000].find((ms) => (ms / windowMs) * plotWidth >= labelWidth) ?? 120_000;
  const xAxis = svg("g", { class: "x-axis" });
  const baseline = MARGIN.top + plotHeight;
  xAxis.append(svg("line", { x1: MARGIN.left, x2: width - MARGIN.right, y1: baseline, y2: baseline, class: "axis" }));
  // Every time zone is a whole number of quarter hours from UTC: a round UTC time is a round local one.
  for (let t = Math.ceil(start / tickMs) * tickMs; t <= now; t += tickMs) {
    const tick = svg("g", { class: "tick", "data-t": t });
    tick.append(svg("line", { x1: x(t), x2: x(t), y1: baseline, y2: baseline + 4, class: "axis" }));
    // A label near an edge is anchored inside the chart rather than cut.
    const half = labelWidth / 2;
    const anchor = x(t) + half > width ? "end" : x(t) - half < 0 ? "start" : "middle";
    tick.append(svg("text", { x: x(t), y: HEIGHT - 6, "text-anchor": anchor }, clockTime(t)));
    xAxis.append(tick);
  }
  chart.append(xAxis);

  for (const [field, className] of [["produce", "line produce"], ["consume", "line consume"]]) {
    const points = series[field].filter((point) => point.t >= start);
    if (points.length) {
      const path = points.map((point, i) => `${i ? "L" : "M"}${x(point.t).toFixed(1)},${y(point.rate).toFixed(1)}`);
      chart.append(svg("path", { d: path.join(" "), class: className }));
    }
  }
  container.replaceChildren(chart);
}
