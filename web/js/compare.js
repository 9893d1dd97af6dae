// compare.js - the same prompt under two settings side by side, streamed
// from POST /v1/completions with per-token log-probs (and 5 alternatives
// per token, shown on hover).
import { postStream, isAbort } from "./api.js";
import { line } from "./charts.js";
import { $, el, fmt, tokenSpan } from "./util.js";

const FIELDS = [
    ["temperature", "Temperature", 0.7, 0.05], ["top_k", "Top-k", 0, 1], ["top_p", "Top-p", 1, 0.01],
    ["min_p", "Min-p", 0, 0.01], ["repetition_penalty", "Repetition penalty", 1, 0.05], ["seed", "Seed", 1, 1],
    ["max_tokens", "Max tokens", 48, 1],
];
const DEFAULTS = { a: { temperature: 0 }, b: { temperature: 1.2, seed: 7 } };
let controller = null;

function settingsOf(side) {
    const body = {};
    for (const [name] of FIELDS) {
        const v = $(`cmp-${side}-${name}`).value.trim();
        if (v !== "") body[name] = Number(v);
    }
    return body;
}

async function runSide(side, signal) {
    const out = $(`cmp-out-${side}`), sum = $(`cmp-sum-${side}`);
    out.replaceChildren();
    sum.textContent = "";
    let total = 0, n = 0;
    const lps = [];
    const t0 = performance.now();
    try {
        await postStream("/v1/completions", { prompt: $("cmp-prompt").value, logprobs: 5, ...settingsOf(side) }, (ev) => {
            const ch = ev.choices && ev.choices[0];
            const lp = ch && ch.logprobs;
            if (!lp) return;
            lp.tokens.forEach((t, i) => {
                const top = Object.entries(lp.top_logprobs[i] || {}).map(([text, l]) => ({ text, p: Math.exp(l) }));
                const l = lp.token_logprobs[i];
                out.append(tokenSpan(t, Math.exp(l), top, { extra: [`log-prob ${fmt(l, 3)}`], testid: `cmp-token-${side}` }));
                total += l;
                lps.push(l);
                n++;
            });
        }, { signal });
        const ms = performance.now() - t0;
        $(`cmp-chart-${side}`).innerHTML = lps.length > 1 ? line(lps, { title: "log-prob of each token (0 = certain)", width: 560, top: 0 }) : "";
        sum.textContent = `${n} tokens · sum log-prob ${fmt(total, 2)} · mean ${fmt(n ? total / n : 0, 3)} · perplexity ${fmt(n ? Math.exp(-total / n) : 0, 2)} · ${fmt(ms / 1000, 2)} s`;
    } catch (e) {
        if (!isAbort(e)) sum.textContent = `error: ${e.message}`;
    }
}

async function run() {
    if (controller) controller.abort();
    controller = new AbortController();
    const c = controller;
    $("cmp-run").disabled = true;
    await Promise.all([runSide("a", c.signal), runSide("b", c.signal)]);
    if (controller === c) controller = null;
    $("cmp-run").disabled = false;
}

export function initCompare() {
    for (const side of ["a", "b"]) {
        const fs = $(`cmp-${side}`);
        for (const [name, label, def, step] of FIELDS) {
            const v = DEFAULTS[side][name] ?? def;
            fs.append(el("label", {}, label, el("input", { type: "number", id: `cmp-${side}-${name}`, step: String(step), value: String(v) })));
        }
    }
    $("cmp-run").addEventListener("click", run);
}
