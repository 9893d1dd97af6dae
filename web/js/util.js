// util.js - small DOM helpers, number formats, and token spans coloured by
// probability with their alternatives shown on hover or focus.

export function $(id) {
    return document.getElementById(id);
}

// el("div", {class: "x", onclick: f}, child, "text", ...)
export function el(tag, attrs = {}, ...children) {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs)) {
        if (v === undefined || v === null || v === false) continue;
        if (k.startsWith("on")) e.addEventListener(k.slice(2), v);
        else if (k === "class") e.className = v;
        else if (k === "text") e.textContent = v;
        else e.setAttribute(k, v === true ? "" : v);
    }
    for (const c of children.flat()) {
        if (c === null || c === undefined || c === false) continue;
        e.append(c instanceof Node ? c : document.createTextNode(String(c)));
    }
    return e;
}

export function esc(s) {
    return String(s).replace(/[&<>"']/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" })[c]);
}

export function fmt(x, digits = 3) {
    if (x === null || x === undefined || Number.isNaN(x)) return "–";
    if (!Number.isFinite(x)) return x > 0 ? "∞" : "−∞";
    if (x !== 0 && Math.abs(x) < 1e-3) return x.toExponential(1);
    return Number(x).toFixed(digits);
}

export function pct(p) {
    return p === null || p === undefined ? "–" : `${(100 * p).toFixed(p >= 0.1 ? 1 : 2)}%`;
}

// A token's text made visible: spaces and newlines shown.
export function showToken(t) {
    return String(t).replace(/\n/g, "↵").replace(/^ /, "␣").replace(/ $/, "␣") || "∅";
}

// Background for a probability: red (unlikely) through yellow to green.
export function probColor(p) {
    const dark = matchMedia("(prefers-color-scheme: dark)").matches;
    const hue = Math.round(120 * Math.max(0, Math.min(1, p)) ** 0.6);
    return dark ? `hsl(${hue} 45% 28%)` : `hsl(${hue} 75% 84%)`;
}

const details = new WeakMap();

// A span for one generated token: coloured by p, alternatives on hover.
// alts: [{text, p}] (the first the most likely); extra: more rows of text.
export function tokenSpan(text, p, alts = [], { extra = [], testid, cls = "" } = {}) {
    const s = el("span", { class: `tok ${cls}`.trim(), tabindex: "0", "data-testid": testid });
    s.textContent = text.replace(/\n/g, "↵\n"); /* a visible mark where the line breaks */
    if (p !== null && p !== undefined) s.style.background = probColor(p);
    details.set(s, { text, p, alts, extra });
    return s;
}

function tooltipHtml(d) {
    let h = `<div><b>${esc(showToken(d.text))}</b> ${d.p !== null && d.p !== undefined ? pct(d.p) : ""}</div>`;
    for (const x of d.extra) h += `<div>${esc(x)}</div>`;
    if (d.alts.length) {
        h += "<table>";
        for (const a of d.alts)
            h += `<tr class="${a.text === d.text ? "chosen" : ""}"><td>${esc(showToken(a.text))}</td><td>${pct(a.p)}</td></tr>`;
        h += "</table>";
    }
    return h;
}

// One tooltip for the page, following hover and keyboard focus.
export function installTooltips() {
    const tip = $("tooltip");
    const show = (target) => {
        const d = details.get(target);
        if (!d) return;
        tip.innerHTML = tooltipHtml(d);
        tip.hidden = false;
        const r = target.getBoundingClientRect();
        const w = tip.offsetWidth, h = tip.offsetHeight;
        let x = Math.min(r.left, innerWidth - w - 8), y = r.bottom + 6;
        if (y + h > innerHeight) y = r.top - h - 6;
        tip.style.left = `${Math.max(4, x)}px`;
        tip.style.top = `${Math.max(4, y)}px`;
    };
    const hide = () => { tip.hidden = true; };
    for (const ev of ["mouseover", "focusin"])
        document.addEventListener(ev, (e) => { if (e.target.classList?.contains("tok")) show(e.target); });
    for (const ev of ["mouseout", "focusout"])
        document.addEventListener(ev, (e) => { if (e.target.classList?.contains("tok")) hide(); });
    document.addEventListener("scroll", hide, true);
}

export function debounce(fn, ms) {
    let t = null;
    return (...a) => { clearTimeout(t); t = setTimeout(() => fn(...a), ms); };
}
