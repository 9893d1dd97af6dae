// charts.js - small SVG charts for the lab, drawn from the server's real
// numbers: horizontal probability bars, a cumulative curve with the nucleus
// boundary, a line over steps and a beam-search tree. Each returns SVG text.
import { esc, showToken, pct, fmt } from "./util.js";

const COLORS = {
    kept: "var(--accent)", cut: "var(--line)", chosen: "var(--good)", greedy: "var(--warn)",
    ghost: "var(--muted)", green: "var(--good)", red: "var(--bad)", bad: "var(--bad)",
};

// items: [{label, value (0..1), ghost (0..1, optional), cls, note}]
export function bars(items, { width = 640, max = null, title = "" } = {}) {
    const rowH = 20, labelW = 120, noteW = 150, top = title ? 22 : 6;
    const barW = width - labelW - noteW - 10;
    const m = max || Math.max(1e-9, ...items.map((i) => Math.max(i.value, i.ghost || 0)));
    const h = top + items.length * rowH + 6;
    let s = `<svg viewBox="0 0 ${width} ${h}" width="${width}" role="img" aria-label="${esc(title || "probabilities")}">`;
    if (title) s += `<text x="4" y="14" class="muted">${esc(title)}</text>`;
    items.forEach((it, i) => {
        const y = top + i * rowH;
        const w = Math.max(0, (barW * it.value) / m);
        s += `<text x="${labelW - 6}" y="${y + 14}" text-anchor="end">${esc(showToken(it.label)).slice(0, 16)}</text>`;
        if (it.ghost !== undefined && it.ghost !== null)
            s += `<rect x="${labelW}" y="${y + 3}" width="${Math.max(0, (barW * it.ghost) / m)}" height="${rowH - 6}" fill="none" stroke="${COLORS.ghost}" stroke-dasharray="3 2"/>`;
        s += `<rect x="${labelW}" y="${y + 3}" width="${w}" height="${rowH - 6}" rx="2" fill="${COLORS[it.cls] || COLORS.kept}"/>`;
        s += `<text x="${labelW + barW + 6}" y="${y + 14}">${esc(it.note ?? pct(it.value))}</text>`;
    });
    return s + "</svg>";
}

// curve: cumulative probabilities of the sorted candidates; p: a mass line;
// kept: how many candidates the stage kept (the boundary).
export function cumulative(curve, { p = null, kept = null, width = 640, title = "" } = {}) {
    const h = 200, l = 44, r = 12, t = 22, b = 28;
    const n = Math.max(2, curve.length);
    /* ranks on a log scale: the head, where the mass is, gets the room */
    const x = (i) => l + ((width - l - r) * Math.log1p(i)) / Math.log1p(n - 1);
    const y = (v) => t + (h - t - b) * (1 - v);
    let s = `<svg viewBox="0 0 ${width} ${h}" width="${width}" role="img" aria-label="${esc(title || "cumulative probability")}">`;
    s += `<text x="4" y="14" class="muted">${esc(title)}</text>`;
    s += `<line x1="${l}" y1="${y(0)}" x2="${width - r}" y2="${y(0)}" stroke="var(--line)"/>`;
    s += `<line x1="${l}" y1="${y(0)}" x2="${l}" y2="${y(1)}" stroke="var(--line)"/>`;
    for (const v of [0, 0.5, 1]) s += `<text x="${l - 6}" y="${y(v) + 4}" text-anchor="end" class="muted">${v}</text>`;
    s += `<text x="${width - r}" y="${h - 1}" text-anchor="end" class="muted">rank, most likely first (log scale) → ${curve.length} shown</text>`;
    for (const k of [1, 10, 100, 1000]) if (k <= n) s += `<text x="${x(k - 1)}" y="${y(0) + 13}" text-anchor="middle" class="muted">${k}</text>`;
    if (kept !== null && kept > 0) {
        const xe = x(Math.min(kept, n) - 1);
        s += `<rect x="${l}" y="${y(1)}" width="${Math.max(1, xe - l)}" height="${y(0) - y(1)}" fill="var(--accent)" opacity=".10"/>`;
        s += `<line x1="${xe}" y1="${y(0)}" x2="${xe}" y2="${y(1)}" stroke="var(--accent)" stroke-width="2"/>`;
        s += `<text x="${xe + 4}" y="${y(1) + 12}">kept ${kept}</text>`;
    }
    if (p !== null) {
        s += `<line x1="${l}" y1="${y(p)}" x2="${width - r}" y2="${y(p)}" stroke="var(--warn)" stroke-dasharray="5 3"/>`;
        s += `<text x="${width - r}" y="${y(p) - 4}" text-anchor="end">p = ${fmt(p, 2)}</text>`;
    }
    const pts = curve.map((v, i) => `${x(i).toFixed(1)},${y(v).toFixed(1)}`).join(" ");
    s += `<polyline points="${pts}" fill="none" stroke="var(--fg)" stroke-width="1.5"/>`;
    return s + "</svg>";
}

// values over steps, with an optional horizontal threshold.
export function line(values, { threshold = null, width = 640, title = "", label = "", top = null } = {}) {
    const h = 170, l = 40, r = 12, t = 22, b = 24;
    const lo = Math.min(0, ...values, threshold ?? 0), hi = top ?? Math.max(1, ...values, threshold ?? 1);
    const n = Math.max(2, values.length);
    const x = (i) => l + ((width - l - r) * i) / (n - 1);
    const y = (v) => t + (h - t - b) * (1 - (v - lo) / (hi - lo || 1));
    let s = `<svg viewBox="0 0 ${width} ${h}" width="${width}" role="img" aria-label="${esc(title)}">`;
    s += `<text x="4" y="14" class="muted">${esc(title)}</text>`;
    s += `<line x1="${l}" y1="${y(0)}" x2="${width - r}" y2="${y(0)}" stroke="var(--line)"/>`;
    s += `<text x="${l - 6}" y="${y(hi) + 4}" text-anchor="end" class="muted">${fmt(hi, 1)}</text>`;
    s += `<text x="${l - 6}" y="${y(lo) + 4}" text-anchor="end" class="muted">${fmt(lo, 1)}</text>`;
    if (threshold !== null) {
        s += `<line x1="${l}" y1="${y(threshold)}" x2="${width - r}" y2="${y(threshold)}" stroke="var(--warn)" stroke-dasharray="5 3"/>`;
        s += `<text x="${width - r}" y="${y(threshold) - 4}" text-anchor="end">${esc(label)}</text>`;
    }
    const pts = values.map((v, i) => `${x(i).toFixed(1)},${y(v).toFixed(1)}`).join(" ");
    s += `<polyline points="${pts}" fill="none" stroke="var(--accent)" stroke-width="2"/>`;
    values.forEach((v, i) => { s += `<circle cx="${x(i)}" cy="${y(v)}" r="2.5" fill="var(--accent)"/>`; });
    return s + "</svg>";
}

// nodes: [{id, parent, text, status, score, step}] of a beam search; the
// root (parent -1) is the prompt. Columns are steps; each node sits in its
// step's column in the order it came.
export function tree(nodes, { best = new Set(), colW = 118, rowH = 28 } = {}) {
    const byStep = new Map();
    const pos = new Map();
    for (const n of nodes) {
        const col = n.step;
        if (!byStep.has(col)) byStep.set(col, 0);
        const row = byStep.get(col);
        byStep.set(col, row + 1);
        pos.set(n.id, { x: 10 + col * colW, y: 16 + row * rowH });
    }
    const rows = Math.max(1, ...byStep.values());
    const cols = Math.max(1, ...byStep.keys()) + 1;
    const w = 20 + cols * colW + 40, h = 24 + rows * rowH;
    let s = `<svg viewBox="0 0 ${w} ${h}" width="${w}" role="img" aria-label="beam search tree">`;
    for (const n of nodes) {
        if (n.parent < 0 || !pos.has(n.parent)) continue;
        const a = pos.get(n.parent), b = pos.get(n.id);
        const color = n.status === "pruned" ? "var(--line)" : best.has(n.id) ? "var(--good)" : "var(--muted)";
        const ax = a.x + (n.parent === 0 ? 48 : 80), bx = b.x - 4;
        s += `<path d="M${ax},${a.y - 4} C${ax + 16},${a.y - 4} ${bx - 16},${b.y - 4} ${bx},${b.y - 4}" fill="none" stroke="${color}" stroke-width="${best.has(n.id) ? 2.5 : 1}"/>`;
    }
    for (const n of nodes) {
        const p = pos.get(n.id);
        const fill = n.status === "pruned" ? "var(--muted)" : n.status === "finished" ? "var(--good)" : "var(--fg)";
        const label = n.parent < 0 ? "prompt" : showToken(n.text).slice(0, 10);
        const deco = n.status === "pruned" ? ` text-decoration="line-through"` : "";
        s += `<text x="${p.x}" y="${p.y}" fill="${fill}"${deco} ${best.has(n.id) ? 'font-weight="700"' : ""}>` +
             `<title>${esc(`${showToken(n.text)}: ${n.status}, log-prob ${fmt(n.logprob)}, total ${fmt(n.sum_logprob)}, score ${fmt(n.score)}`)}</title>${esc(label)}</text>`;
        if (n.parent >= 0) s += `<text x="${p.x}" y="${p.y + 10}" class="muted tiny">${fmt(n.score, 2)}</text>`;
    }
    return s + "</svg>";
}
