// chart.js - a voucher's stock and sales over the last minutes as plain
// SVG: the stock as a line (left scale), the units sold in each bucket as
// bars (right scale), time running to "now" at the right edge. The window
// grows with the readings, from one minute to five.

const SVG = "http://www.w3.org/2000/svg";
const PAD = { left: 44, right: 40, top: 14, bottom: 24 };

function node(tag, attrs, text) {
    const n = document.createElementNS(SVG, tag);
    for (const [k, v] of Object.entries(attrs)) n.setAttribute(k, String(v));
    if (text !== undefined) n.textContent = text;
    return n;
}

// The top of a scale of four steps at or above n, each step a round
// number of units (1, 2 or 5 times a power of ten).
function niceTop(n) {
    const step = Math.max(1, n / 4);
    const p = 10 ** Math.floor(Math.log10(step));
    for (const m of [1, 2, 5, 10]) if (m * p >= step) return 4 * m * p;
    return 40 * p;
}

// Units sold between two readings: the rise of the sold count when both
// have one (the stats of an admin), else the drop of the stock (a rise,
// such as a cancelled order's unit coming back, counts as none).
export function soldBetween(a, b) {
    if (Number.isFinite(a.sold) && Number.isFinite(b.sold)) return b.sold - a.sold;
    return a.stock - b.stock;
}

// Units sold per bucket of bucketMs, from a history of readings.
export function salesPerBucket(points, now, windowMs, bucketMs) {
    const n = Math.ceil(windowMs / bucketMs);
    const sold = new Array(n).fill(0);
    for (let i = 1; i < points.length; i++) {
        const drop = soldBetween(points[i - 1], points[i]);
        const age = now - points[i].t;
        if (drop <= 0 || age < 0 || age >= windowMs) continue;
        sold[n - 1 - Math.floor(age / bucketMs)] += drop;
    }
    return sold;
}

// The window to show: from shortly before the first reading, at least a
// minute and at most five; and a bucket for the bars, 60 to a window.
export function chartWindow(points, now) {
    const since = points.length ? now - points[0].t + 10000 : 0;
    const windowMs = Math.min(5 * 60000, Math.max(60000, Math.ceil(since / 60000) * 60000));
    return { windowMs, bucketMs: windowMs / 60 };
}

// Draw into svg the readings points ([{t: server ms, stock, sold?}],
// oldest first) of the windowMs before now.
export function drawChart(svg, points, now, { windowMs, bucketMs } = chartWindow(points, now)) {
    // One unit of the drawing per CSS pixel, so its text keeps its size
    // from a phone to a desktop.
    const W = Math.max(320, Math.round(svg.clientWidth || 960));
    const H = Math.max(200, Math.min(260, Math.round(W * 0.3)));
    svg.setAttribute("viewBox", `0 0 ${W} ${H}`);
    const x0 = PAD.left;
    const x1 = W - PAD.right;
    const y0 = H - PAD.bottom;
    const y1 = PAD.top;
    const xOf = (t) => x1 - ((now - t) / windowMs) * (x1 - x0);
    const shown = points.filter((p) => now - p.t <= windowMs);
    const sold = salesPerBucket(points, now, windowMs, bucketMs);
    const stockTop = niceTop(Math.max(1, ...shown.map((p) => p.stock)));
    const salesTop = niceTop(Math.max(1, ...sold));
    const parts = [];

    for (let k = 0; k <= 4; k++) {
        const y = y0 - ((y0 - y1) * k) / 4;
        parts.push(node("line", { x1: x0, x2: x1, y1: y, y2: y, class: "grid" }));
        parts.push(
            node("text", { x: x0 - 6, y: y + 4, "text-anchor": "end" }, String(Math.round((stockTop * k) / 4))),
        );
        parts.push(
            node("text", { x: x1 + 6, y: y + 4 }, String(Math.round((salesTop * k) / 4))),
        );
    }
    // A tick every 10 s for one minute, every minute beyond; every other
    // one when the drawing is narrow.
    const tick = (windowMs <= 60000 ? 10000 : 60000) * (W < 600 ? 2 : 1);
    for (let t = 0; t <= windowMs; t += tick) {
        const x = xOf(now - t);
        const label = t === 0 ? "now" : tick < 60000 ? `-${t / 1000} s` : `-${t / 60000} min`;
        parts.push(node("line", { x1: x, x2: x, y1: y0, y2: y0 + 4, class: "axis" }));
        parts.push(node("text", { x, y: H - 6, "text-anchor": "middle" }, label));
    }
    parts.push(node("line", { x1: x0, x2: x1, y1: y0, y2: y0, class: "axis" }));

    const bw = ((x1 - x0) * bucketMs) / windowMs;
    sold.forEach((n, i) => {
        if (!n) return;
        const h = ((y0 - y1) * n) / salesTop;
        parts.push(
            node("rect", {
                x: x0 + i * bw + 0.5,
                y: y0 - h,
                width: Math.max(1, bw - 1),
                height: h,
                class: "sales",
            }),
        );
    });

    if (shown.length) {
        const d = shown
            .map((p, i) => {
                const x = xOf(p.t).toFixed(1);
                const y = (y0 - ((y0 - y1) * p.stock) / stockTop).toFixed(1);
                return `${i ? "L" : "M"}${x},${y}`;
            })
            .join(" ");
        parts.push(node("path", { d, class: "stock" }));
    }
    parts.push(node("text", { x: x0, y: y1 - 2 }, "stock"));
    parts.push(node("text", { x: x1, y: y1 - 2, "text-anchor": "end" }, `sold per ${Math.round(bucketMs / 100) / 10} s`));
    svg.replaceChildren(...parts);
}
