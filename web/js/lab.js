// lab.js - the decoding lab: a prompt, then generation one step at a time
// (step, back, play, pause) with the real model's distributions, chapter
// by chapter. Steps come from POST /v1/inspect: the page sends the prompt
// and the tokens chosen so far, so "back" is the same request with one
// token less, and moving a slider asks again for the current step with the
// new settings. Beam search, speculative decoding and self-consistency
// stream from their own /v1/inspect/... endpoints.
import { postJSON, postStream, isAbort } from "./api.js";
import { bars, cumulative, line, tree } from "./charts.js";
import { $, el, esc, fmt, pct, showToken, tokenSpan, debounce } from "./util.js";

const CHAPTERS = [
    ["loop", "The loop"],
    ["greedy", "Greedy vs sampling"],
    ["temperature", "Temperature"],
    ["filters", "Top-k, top-p, min-p"],
    ["penalties", "Penalties and guard"],
    ["beam", "Beam search"],
    ["speculative", "Speculative decoding"],
    ["vote", "Self-consistency"],
    ["constrained", "Constrained output"],
    ["watermark", "Watermark"],
];

const st = {
    chapter: "loop",
    steps: [],        // /v1/inspect step events, one per chosen token
    prompt: [],       // the prompt's tokens ({token, text}) from the last answer
    ended: false,     // the last step chose an end-of-generation token
    busy: false,
    playing: false,
    seq: 0,           // request counter: late answers to older requests are dropped
    run: null,        // AbortController of a beam / speculative / vote run
    constraint: null, // {kind, value} applied to the steps
    watermark: null,  // {key, gamma, delta} applied to the steps
};

// ---- settings -------------------------------------------------------------

const SLIDERS = [
    ["lab-temperature", "temperature", (v) => fmt(v, 2)],
    ["lab-top-k", "top_k", (v) => (v === 0 ? "off" : String(v))],
    ["lab-top-p", "top_p", (v) => fmt(v, 2)],
    ["lab-min-p", "min_p", (v) => fmt(v, 2)],
    ["lab-typical-p", "typical_p", (v) => fmt(v, 2)],
    ["lab-rep", "repetition_penalty", (v) => fmt(v, 2)],
    ["lab-guard", "repetition_guard", (v) => (v === 0 ? "off" : fmt(v, 1))],
];

function sampling() {
    const p = {};
    for (const [id, name] of SLIDERS) p[name] = Number($(id).value);
    const seed = $("lab-seed").value.trim();
    if (seed !== "") p.seed = Number(seed);
    return p;
}

function stepRequest(tokens) {
    const body = { prompt: $("lab-prompt").value, tokens, max_tokens: 1, top_n: 12, curve_points: 300, ...sampling() };
    if (st.constraint) {
        const c = st.constraint;
        if (c.kind === "regex") body.regex = c.value;
        else if (c.kind === "choice") body.choice = c.value.split("|").map((s) => s.trim()).filter(Boolean);
        else body.response_format = { type: "json_object" };
    }
    if (st.watermark) body.watermark = st.watermark;
    return body;
}

function status(text, error = false) {
    const s = $("lab-status");
    s.textContent = text;
    s.classList.toggle("error", error);
}

// ---- stepping -------------------------------------------------------------

function tokensSoFar(n = st.steps.length) {
    return st.steps.slice(0, n).map((s) => s.chosen.token);
}

// Asks for the step after the first n chosen tokens.
async function fetchStep(n) {
    const id = ++st.seq;
    const ans = await postJSON("/v1/inspect", stepRequest(tokensSoFar(n)));
    if (id !== st.seq) return null; /* a newer request went out meanwhile */
    const step = ans.events.find((e) => e.type === "step");
    const done = ans.events.find((e) => e.type === "done");
    if (done) st.prompt = done.prompt_tokens;
    return step ? { step, eos: done && done.finish === "eos", stop: done && done.finish === "stop" } : null;
}

async function step() {
    if (st.busy || st.ended) return false;
    st.busy = true;
    try {
        const r = await fetchStep(st.steps.length);
        if (!r) return false;
        st.steps.push(r.step);
        st.ended = r.eos || r.stop;
        status(st.ended ? (r.eos ? "the model ended the text (end-of-generation token)" : "the grammar is complete") : "");
        render();
        return true;
    } catch (e) {
        status(e.message, true);
        return false;
    } finally {
        st.busy = false;
    }
}

function back() {
    if (!st.steps.length) return;
    st.steps.pop();
    st.ended = false;
    st.seq++;
    status("");
    render();
}

function reset() {
    st.steps = [];
    st.ended = false;
    st.seq++;
    stopPlaying();
    status("");
    render();
}

async function play() {
    if (st.playing) { stopPlaying(); return; }
    st.playing = true;
    $("lab-play").textContent = "Pause";
    while (st.playing && !st.ended && st.steps.length < 200) {
        if (!(await step())) break;
        await new Promise((r) => setTimeout(r, 300));
    }
    stopPlaying();
}

function stopPlaying() {
    st.playing = false;
    $("lab-play").textContent = "Play";
}

// The settings moved: the current step is drawn again under them.
const redoLast = debounce(async () => {
    if (!st.steps.length || st.busy) return;
    const n = st.steps.length - 1;
    try {
        const r = await fetchStep(n);
        if (!r || st.steps.length !== n + 1) return;
        st.steps[n] = r.step;
        st.ended = r.eos || r.stop;
        status("");
        render();
    } catch (e) {
        status(e.message, true);
    }
}, 60);

// ---- the text ---------------------------------------------------------------

function stageByName(s, name) {
    return s.stages.find((x) => x.stage === name);
}

function lastStage(s) {
    return s.stages[s.stages.length - 1];
}

function renderText() {
    const box = $("lab-text");
    box.replaceChildren();
    const prompt = st.prompt.filter((t) => t.text !== "<s>").map((t) => t.text).join("");
    box.append(el("span", { class: "prompt", text: prompt || $("lab-prompt").value }));
    st.steps.forEach((s, i) => {
        const raw = s.stages[0];
        const alts = raw.top.map((c) => ({ text: c.text, p: c.prob }));
        const extra = [`model p ${pct(s.chosen.model_prob)} · after the chain ${pct(s.chosen.prob)}`,
            `greedy: ${showToken(s.greedy.text)} · entropy ${fmt(s.entropy, 2)} nats`];
        let cls = i === st.steps.length - 1 ? "current" : "";
        /* the watermark chapter colours tokens green / red instead of by probability */
        const marked = st.chapter === "watermark" && s.watermark;
        if (marked) cls += s.watermark.green ? " chip green" : " chip red";
        if (marked) extra.push(s.watermark.green ? "green-list token" : "not in the green list");
        box.append(tokenSpan(s.chosen.text, marked ? null : s.chosen.model_prob, alts, { extra, testid: "lab-token", cls }));
    });
}

// ---- chapters -----------------------------------------------------------------

const TEXT = {
    loop: `<h2>The loop</h2><p>A language model reads the whole context and, in one forward pass, gives a score
        (logit) to every token of its vocabulary; the softmax of the scores is the next-token distribution.
        A decoding rule picks one token, it is appended to the context, and the loop starts again.
        Press <b>Step</b> (→) to run one turn with the real model, <b>Back</b> (←) to undo it.</p>`,
    greedy: `<h2>Greedy vs sampling</h2><p>Greedy decoding always takes the most likely token: the same text every
        time, often repetitive. Sampling draws from the distribution, so a less likely token is taken as often as its
        probability says. Here is the same step, both ways: the orange bar is greedy's choice, the green one the draw.</p>`,
    temperature: `<h2>Temperature</h2><p>Temperature divides the logits before the softmax: below 1 the distribution
        sharpens (towards greedy), above 1 it flattens (more surprising tokens). Move the slider: the current step is
        recomputed at once. Dashed outlines are the model's own probabilities; entropy measures the spread.</p>`,
    filters: `<h2>Top-k, top-p, min-p, typical-p</h2><p>Truncation keeps only the plausible head of the distribution:
        top-k keeps the k most likely tokens; top-p (nucleus sampling) keeps the smallest set whose probability adds up to p,
        shown where the cumulative curve crosses p; min-p keeps tokens at least min-p times as likely as the best one;
        typical-p keeps tokens whose surprise is close to the entropy. The rest are cut before the draw.</p>`,
    penalties: `<h2>Penalties and the repetition guard</h2><p>The repetition penalty divides positive logits (and
        multiplies negative ones) of tokens already in the window; the repetition guard raises that penalty as the recent output
        repeats itself more. The table shows the logits before and after, for the tokens that moved.</p>`,
    beam: `<h2>Beam search</h2><p>Beam search keeps the <i>width</i> best partial continuations by total log-probability,
        extends each by its best tokens, and keeps the best again. Finished hypotheses are ranked by
        sum log-prob / length<sup>α</sup> (α the length penalty). Struck-through tokens were cut.</p>`,
    speculative: `<h2>Speculative decoding</h2><p>A cheap guesser proposes several tokens; the model checks them all in
        one forward pass and accepts a proposal with probability min(1, p/q). At the first rejection it draws a
        correction, and when all pass it draws one token more, so the output is exactly what the model alone would give.
        Green: accepted, red: rejected, grey: never checked.</p>`,
    vote: `<h2>Self-consistency</h2><p>Sample several paths from the same prompt and let their answers vote: the answer most
        paths reach wins. Each path's answer is the last match of the pattern in its text.</p>`,
    constrained: `<h2>Constrained output</h2><p>A grammar (here a regular expression, a list of choices, or JSON) decides,
        before each draw, which tokens may come next; the others are masked out. Turn it on and step: the chart shows what
        the grammar refused at this step.</p>`,
    watermark: `<h2>Watermark</h2><p>Before each token a keyed hash of the previous token splits the vocabulary into a green
        list (a share γ of it) and the rest, and adds δ to the green logits. The text then has more green tokens than chance
        gives; the running z-score measures how many more. Turn it on and step: green and red tokens are marked.</p>`,
};

function field(label, input) {
    return el("label", {}, label, input);
}

function chapterControls(ch) {
    switch (ch) {
    case "beam":
        return el("div", { class: "row" },
            field("Width", el("input", { type: "number", id: "beam-width", min: "1", max: "8", value: "3" })),
            field("Length penalty α", el("input", { type: "number", id: "beam-alpha", min: "-2", max: "3", step: "0.1", value: "1" })),
            field("Max tokens", el("input", { type: "number", id: "beam-max", min: "1", max: "64", value: "10" })),
            el("button", { type: "button", id: "beam-run", "data-testid": "lab-beam-run", onclick: runBeam }, "Run beam search"));
    case "speculative":
        return el("div", { class: "row" },
            field("Guesser", el("select", { id: "spec-draft" },
                el("option", { value: "lookup" }, "prompt lookup"),
                el("option", { value: "self" }, "the model itself (2nd context)"),
                el("option", { value: "model" }, "the server's --draft model"))),
            field("Draft length", el("input", { type: "number", id: "spec-k", min: "1", max: "16", value: "4" })),
            field("Max tokens", el("input", { type: "number", id: "spec-max", min: "1", max: "256", value: "48" })),
            el("button", { type: "button", id: "spec-run", "data-testid": "lab-spec-run", onclick: runSpeculative }, "Run"));
    case "vote":
        return el("div", { class: "row" },
            field("Paths", el("input", { type: "number", id: "vote-paths", min: "2", max: "8", value: "5" })),
            field("Max tokens", el("input", { type: "number", id: "vote-max", min: "1", max: "128", value: "16" })),
            field("Answer pattern (POSIX ERE)", el("input", { type: "text", id: "vote-pattern", value: "named [A-Z][a-z]+" })),
            el("button", { type: "button", id: "vote-run", "data-testid": "lab-vote-run", onclick: runVote }, "Sample and vote"));
    case "constrained": {
        const kind = el("select", { id: "con-kind" },
            el("option", { value: "regex" }, "regular expression"), el("option", { value: "choice" }, "choice (a|b|c)"),
            el("option", { value: "json" }, "any JSON object"));
        const value = el("input", { type: "text", id: "con-value", value: "( [a-z]+){3,8}\\." });
        const on = el("input", { type: "checkbox", id: "con-on", "data-testid": "lab-constraint-on" });
        if (st.constraint) { kind.value = st.constraint.kind; value.value = st.constraint.value; on.checked = true; }
        const apply = () => {
            st.constraint = on.checked ? { kind: kind.value, value: value.value } : null;
            reset();
        };
        on.addEventListener("change", apply);
        kind.addEventListener("change", () => on.checked && apply());
        value.addEventListener("change", () => on.checked && apply());
        return el("div", { class: "row" }, field("Constraint", kind), field("Pattern / choices", value),
            el("label", { class: "check" }, on, "apply to the steps"));
    }
    case "watermark": {
        const key = el("input", { type: "text", id: "wm-key", value: st.watermark ? st.watermark.key : "lab-secret" });
        const gamma = el("input", { type: "number", id: "wm-gamma", min: "0.05", max: "0.95", step: "0.05", value: st.watermark ? st.watermark.gamma : "0.25" });
        const delta = el("input", { type: "number", id: "wm-delta", min: "0", max: "10", step: "0.5", value: st.watermark ? st.watermark.delta : "2" });
        const on = el("input", { type: "checkbox", id: "wm-on", "data-testid": "lab-watermark-on" });
        on.checked = !!st.watermark;
        const apply = () => {
            st.watermark = on.checked ? { key: key.value || "key", gamma: Number(gamma.value), delta: Number(delta.value) } : null;
            reset();
        };
        on.addEventListener("change", apply);
        for (const i of [key, gamma, delta]) i.addEventListener("change", () => on.checked && apply());
        return el("div", { class: "row" }, field("Key", key), field("γ (green share)", gamma), field("δ (added to green logits)", delta),
            el("label", { class: "check" }, on, "watermark the steps"));
    }
    default:
        return null;
    }
}

function renderChapter() {
    const art = $("lab-chapter");
    art.innerHTML = TEXT[st.chapter];
    const c = chapterControls(st.chapter);
    if (c) art.append(c);
    for (const a of $("lab-chapters").children) a.setAttribute("aria-current", a.dataset.chapter === st.chapter ? "true" : "false");
}

// ---- charts of the current step ---------------------------------------------

function stats(pairs) {
    return `<div class="stats">${pairs.map(([k, v]) => `<span>${esc(k)} <b>${esc(v)}</b></span>`).join("")}</div>`;
}

function chartLoop(s) {
    const raw = s.stages[0];
    const ctx = st.prompt.length + st.steps.length - 1;
    const last = tokensSoFar(st.steps.length - 1).slice(-4);
    const tail = st.steps.slice(Math.max(0, st.steps.length - 1 - last.length), st.steps.length - 1).map((x) => x.chosen.text).join("");
    const boxes = `<div class="loop">
        <div class="box"><b>context</b><br>${ctx} tokens<br><code>…${esc(tail.slice(-24))}</code></div><span class="arrow">→</span>
        <div class="box"><b>forward pass</b><br>${raw.kept} logits</div><span class="arrow">→</span>
        <div class="box"><b>distribution</b><br>entropy ${fmt(s.entropy, 2)} nats<br>${s.effective_vocab} tokens above 1%</div><span class="arrow">→</span>
        <div class="box"><b>choice</b><br><code>${esc(showToken(s.chosen.text))}</code> (${pct(s.chosen.model_prob)})</div><span class="arrow">→</span>
        <div class="box"><b>append</b><br>position ${s.position}</div></div>`;
    const items = raw.top.map((c) => ({ label: c.text, value: c.prob,
        cls: c.token === s.chosen.token ? "chosen" : c.token === s.greedy.token ? "greedy" : "kept" }));
    return boxes + bars(items, { title: "the model's next-token distribution (top 12): green the token chosen, orange greedy's choice" });
}

function chartGreedy(s) {
    const fin = lastStage(s);
    const items = s.stages[0].top.map((c) => {
        const f = fin.top.find((x) => x.token === c.token);
        return { label: c.text, value: f ? f.prob : 0, ghost: c.prob,
            cls: c.token === s.chosen.token ? "chosen" : c.token === s.greedy.token ? "greedy" : f ? "kept" : "cut",
            note: `${pct(f ? f.prob : 0)} (model ${pct(c.prob)})` };
    });
    /* twenty draws from the shown candidates, made here in the browser, to
     * show what "drawn as often as its probability says" looks like */
    const mass = fin.top.reduce((a, c) => a + c.prob, 0);
    const draws = [];
    for (let k = 0; k < 20 && mass > 0; k++) {
        let u = Math.random() * mass, pick = fin.top[fin.top.length - 1];
        for (const c of fin.top) { if ((u -= c.prob) < 0) { pick = c; break; } }
        draws.push(`<span class="chip${pick.token === s.greedy.token ? "" : " ok"}">${esc(showToken(pick.text))}</span>`);
    }
    return stats([["greedy takes", showToken(s.greedy.text)], ["sampling drew", showToken(s.chosen.text)],
        ["its probability in the draw", pct(s.chosen.prob)], ["temperature", fmt(Number($("lab-temperature").value), 2)]]) +
        bars(items, { title: "the distribution sampled from (bars) and the model's (dashed)" }) +
        `<p class="legend">Twenty more draws from it (in the browser; green: not greedy's token):</p><div class="pass">${draws.join(" ")}</div>`;
}

function chartTemperature(s) {
    const t = stageByName(s, "temperature") || lastStage(s);
    const raw = s.stages[0];
    const items = t.top.map((c) => {
        const r = raw.top.find((x) => x.token === c.token);
        return { label: c.text, value: c.prob, ghost: r ? r.prob : null, cls: c.token === s.chosen.token ? "chosen" : "kept" };
    });
    const T = Number($("lab-temperature").value);
    return stats([["temperature", fmt(T, 2)], ["entropy of the model", `${fmt(raw.entropy, 3)} nats`],
        ["entropy after", `${fmt(t.entropy, 3)} nats`], ["candidates left", String(t.kept)]]) +
        (T === 0 ? `<p class="legend">Temperature 0 is greedy decoding: the most likely token, always.</p>` : "") +
        bars(items, { max: 1, title: `after temperature ${fmt(T, 2)} (bars) vs the model (dashed)` });
}

function chartFilters(s) {
    const names = s.stages.map((x) => x.stage);
    const i = names.indexOf("top_p");
    const input = i > 0 ? s.stages[i - 1] : s.stages.filter((x) => ["raw", "top_k"].includes(x.stage)).pop();
    const p = Number($("lab-top-p").value);
    const kept = i > 0 ? s.stages[i].kept : input.kept;
    const fin = lastStage(s);
    const items = s.stages[0].top.map((c, rank) => {
        const f = fin.top.find((x) => x.token === c.token);
        const alive = !!f || rank < fin.kept;
        return { label: c.text, value: c.prob, cls: c.token === s.chosen.token ? "chosen" : alive ? "kept" : "cut",
            note: `${pct(c.prob)}${alive ? "" : " cut"}` };
    });
    const chain = s.stages.map((x) => `${x.stage} ${x.kept}`).join(" → ");
    return stats([["kept", chain], ["effective vocabulary", `${s.effective_vocab} (p > 1%)`],
        ["entropy after", `${fmt(fin.entropy, 3)} nats`]]) +
        cumulative(input.curve || [], { p: p < 1 ? p : null, kept, title: `cumulative probability of the candidates top-p sees (after ${input.stage})` }) +
        bars(items, { title: "the model's top 12: kept (blue) and cut (grey) by the filters" });
}

function chartPenalties(s) {
    const rows = [];
    for (const x of s.stages)
        for (const c of x.changed || [])
            rows.push(`<tr><td>${esc(x.stage)}</td><td><code>${esc(showToken(c.text))}</code></td><td class="num">${fmt(c.before, 3)}</td><td class="num">${fmt(c.after, 3)}</td><td class="num">${fmt(c.after - c.before, 3)}</td></tr>`);
    const sev = s.repetition_severity !== undefined ? [["repetition severity", fmt(s.repetition_severity, 3)]] : [];
    const table = rows.length ? `<table class="data"><tr><th>stage</th><th>token</th><th>logit before</th><th>after</th><th>change</th></tr>${rows.join("")}</table>`
        : `<p class="legend">No logit moved at this step: raise the repetition penalty or the guard and step on (the window is the generated text).</p>`;
    const raw = s.stages[0];
    const shaped = [...s.stages].reverse().find((x) => ["penalties", "repetition_guard", "no_repeat_ngram"].includes(x.stage)) || raw;
    const items = raw.top.map((c) => {
        const a = shaped.top.find((x) => x.token === c.token);
        return { label: c.text, value: a ? a.prob : 0, ghost: c.prob, cls: c.token === s.chosen.token ? "chosen" : "kept" };
    });
    return stats([["penalty", fmt(Number($("lab-rep").value), 2)], ["guard", $("lab-guard").value], ...sev]) + table +
        bars(items, { title: `probabilities after ${shaped.stage} (bars) vs the model (dashed)` });
}

function chartConstrained(s) {
    if (!s.mask) return `<p class="legend">Turn the constraint on (above), then step.</p>`;
    const m = s.mask;
    const chips = (list, cls) => list.map((c) => `<span class="chip ${cls}">${esc(showToken(c.text))} ${pct(c.prob)}</span>`).join(" ");
    return stats([["allowed", String(m.allowed)], ["refused", String(m.refused)], ["probability mass allowed", pct(m.allowed_mass)],
        ["grammar may end", m.complete ? "yes" : "no"]]) +
        (s.grammar_rerun ? `<p class="legend">The first draw was refused: the chain ran again on the allowed tokens only.</p>` : "") +
        `<p><b>Refused</b> (most likely first):</p><div class="pass">${chips(m.refused_top, "no")}</div>` +
        `<p><b>Allowed</b>:</p><div class="pass">${chips(m.allowed_top, "ok")}</div>`;
}

function chartWatermark(s) {
    if (!s.watermark) return `<p class="legend">Turn the watermark on (above), then step or play.</p>`;
    const zs = st.steps.filter((x) => x.watermark).map((x) => x.watermark.z ?? 0);
    const w = s.watermark;
    const wmStage = stageByName(s, "watermark") || s.stages[0];
    const items = wmStage.top.map((c) => ({ label: c.text, value: c.prob, cls: c.green ? "green" : "red" }));
    return stats([["this token", w.green ? "green" : "red"], ["green", `${w.green_count ?? 0} of ${w.scored ?? 0} scored`],
        ["z", fmt(w.z, 2)], ["p-value", fmt(w.p_value, 4)], ["γ", fmt(w.gamma, 2)]]) +
        line(zs, { threshold: 4, label: "z = 4: detected", title: "running z-score of the generated tokens" }) +
        bars(items, { title: "candidates after the watermark: green list (green) and the rest (red)" });
}

function renderChart() {
    const box = $("lab-chart");
    if (["beam", "speculative", "vote"].includes(st.chapter)) {
        if (!box.dataset.run || box.dataset.run !== st.chapter) box.innerHTML = `<p class="legend">Press the button above to run it on the prompt.</p>`;
        return;
    }
    const s = st.steps[st.steps.length - 1];
    if (!s) {
        box.innerHTML = `<p class="legend">Press <b>Step</b> to generate the first token.</p>`;
        return;
    }
    const f = { loop: chartLoop, greedy: chartGreedy, temperature: chartTemperature, filters: chartFilters,
        penalties: chartPenalties, constrained: chartConstrained, watermark: chartWatermark }[st.chapter];
    box.innerHTML = f(s);
}

function render() {
    renderText();
    renderChart();
    $("lab-back").disabled = !st.steps.length;
    $("lab-step").disabled = st.ended;
}

// ---- runs: beam, speculative, self-consistency ---------------------------------

function num(id) { return Number($(id).value); }

async function streamRun(path, body, onEvent) {
    if (st.run) st.run.abort();
    const ctl = new AbortController();
    st.run = ctl;
    status("running…");
    try {
        await postStream(path, { prompt: $("lab-prompt").value, ...body }, onEvent, { signal: ctl.signal });
        status("");
    } catch (e) {
        if (!isAbort(e)) status(e.message, true);
    } finally {
        if (st.run === ctl) st.run = null;
    }
}

async function runBeam() {
    const box = $("lab-chart");
    box.dataset.run = "beam";
    const nodes = [{ id: 0, parent: -1, text: "", status: "root", step: 0, score: 0 }];
    const draw = (best = new Set(), table = "") => {
        box.innerHTML = `<div data-testid="lab-beam-tree">${tree(nodes, { best })}</div>${table}`;
    };
    draw();
    await streamRun("/v1/inspect/beam", { beam_width: num("beam-width"), length_penalty: num("beam-alpha"), max_tokens: num("beam-max") }, (ev) => {
        if (ev.type === "beam_step") {
            for (const n of ev.nodes) nodes.push({ ...n, step: ev.step });
            draw();
        } else if (ev.type === "done") {
            const best = new Set();
            const byId = new Map(nodes.map((n) => [n.id, n]));
            if (ev.hypotheses.length) for (let n = byId.get(ev.hypotheses[0].id); n; n = byId.get(n.parent)) best.add(n.id);
            const rows = ev.hypotheses.map((h, i) => `<tr><td>${i + 1}</td><td><code>${esc(h.text)}</code></td><td class="num">${fmt(h.sum_logprob)}</td><td class="num">${h.tokens.length}</td><td class="num">${fmt(h.score)}</td><td>${esc(h.finish)}</td></tr>`);
            draw(best, `<p class="legend">Green: the best hypothesis's path. Below each token: its score so far.</p><table class="data" data-testid="lab-beam-hypotheses"><tr><th>#</th><th>hypothesis</th><th>sum log-prob</th><th>length</th><th>score (α ${fmt(ev.length_penalty, 1)})</th><th>end</th></tr>${rows.join("")}</table>`);
        }
    });
}

async function runSpeculative() {
    const box = $("lab-chart");
    box.dataset.run = "speculative";
    box.innerHTML = "";
    const passes = el("div", { "data-testid": "lab-spec-passes" });
    const summary = el("div");
    box.append(summary, passes);
    const chip = (t, cls, title) => el("span", { class: `chip ${cls}`, title }, showToken(t.text));
    await streamRun("/v1/inspect/speculative", {
        draft: $("spec-draft").value, draft_max: num("spec-k"), max_tokens: num("spec-max"), ...sampling(),
        repetition_guard: undefined,
    }, (ev) => {
        if (ev.type === "pass") {
            const row = el("div", { class: "pass", "data-testid": "lab-spec-pass" }, el("span", { class: "muted" }, `pass ${ev.pass + 1}:`));
            for (const p of ev.proposed)
                row.append(chip(p, p.accepted ? "ok" : p.p === null ? "skip" : "no", `p ${fmt(p.p)} · q ${fmt(p.q)}`));
            if (ev.drawn) row.append(el("span", { class: "muted" }, "→"), chip(ev.drawn, "drawn", `${ev.drawn.kind} draw from the model`));
            row.append(el("span", { class: "muted" }, ` ${ev.accepted}/${ev.proposed.length} accepted`));
            passes.append(row);
        } else if (ev.type === "done") {
            const t = ev.timing || {};
            summary.innerHTML = stats([["guesser", ev.draft], ["proposed", String(ev.drafted)], ["accepted", String(ev.accepted)],
                ["acceptance", pct(ev.acceptance_rate)], ["model passes", `${ev.target_passes} for ${ev.tokens.length} tokens`],
                ["tokens per pass (ideal speedup)", fmt(ev.tokens_per_pass, 2)],
                ["measured speedup", t.speedup ? `${fmt(t.speedup, 2)}× (${fmt(t.speculative_ms, 1)} vs ${fmt(t.plain_ms, 1)} ms)` : "–"],
                ...(ev.same_as_plain !== undefined ? [["same text as plain greedy", ev.same_as_plain ? "yes" : "NO"]] : [])]);
        }
    });
}

async function runVote() {
    const box = $("lab-chart");
    box.dataset.run = "vote";
    box.innerHTML = "";
    const n = num("vote-paths");
    const paths = [];
    const list = el("div", { class: "paths" });
    for (let i = 0; i < n; i++) {
        const p = el("div", { class: "path", "data-testid": "lab-vote-path" }, `${i + 1}. `);
        paths.push({ view: p, text: el("span") });
        p.append(paths[i].text);
        list.append(p);
    }
    const tally = el("div");
    box.append(list, tally);
    const pattern = $("vote-pattern").value.trim();
    await streamRun("/v1/inspect/self_consistency", {
        paths: n, max_tokens: num("vote-max"), answer_pattern: pattern || undefined, ...sampling(), repetition_guard: undefined,
    }, (ev) => {
        if (ev.type === "path_text") paths[ev.index].text.textContent += ev.text;
        else if (ev.type === "done") {
            const counts = new Map();
            for (const p of ev.paths) {
                const v = paths[p.index];
                v.text.textContent = p.text;
                if (p.answer !== null) {
                    v.view.append(" → ", el("span", { class: "answer" }, p.answer));
                    counts.set(p.answer, (counts.get(p.answer) || 0) + 1);
                }
                if (p.answer !== null && p.answer === ev.answer) v.view.classList.add("winner");
            }
            const items = [...counts.entries()].sort((a, b) => b[1] - a[1]).map(([a, c]) => ({ label: a, value: c / ev.paths.length, cls: a === ev.answer ? "chosen" : "kept", note: `${c} vote${c > 1 ? "s" : ""}` }));
            tally.innerHTML = stats([["answer", ev.answer ?? "none"], ["votes", `${ev.votes} of ${ev.paths.length}`]]) +
                (items.length ? bars(items, { max: 1, title: "votes" }) : `<p class="legend">No path matched the pattern.</p>`);
        }
    });
}

// ---- wiring -----------------------------------------------------------------------

function setChapter(ch) {
    if (!TEXT[ch]) return;
    st.chapter = ch;
    if (st.run) st.run.abort();
    delete $("lab-chart").dataset.run;
    renderChapter();
    render();
}

export function labKey(e) {
    if (e.target.closest("input, textarea, select, [contenteditable]")) return;
    if (e.key === "ArrowRight") { e.preventDefault(); step(); }
    else if (e.key === "ArrowLeft") { e.preventDefault(); back(); }
    else if (e.key === "p") play();
}

export function initLab() {
    const nav = $("lab-chapters");
    for (const [id, name] of CHAPTERS)
        nav.append(el("a", { href: `#lab/${id}`, "data-chapter": id, "data-testid": `lab-chapter-${id}` }, name));
    for (const [id, , show] of SLIDERS) {
        const input = $(id), out = $(`${id}-out`);
        const update = () => { out.textContent = show(Number(input.value)); };
        input.addEventListener("input", () => { update(); redoLast(); });
        update();
    }
    $("lab-seed").addEventListener("change", redoLast);
    $("lab-step").addEventListener("click", step);
    $("lab-back").addEventListener("click", back);
    $("lab-play").addEventListener("click", play);
    $("lab-reset").addEventListener("click", reset);
    $("lab-prompt").addEventListener("change", reset);
    renderChapter();
    render();
}

export function showLab(sub) {
    setChapter(sub && TEXT[sub] ? sub : st.chapter);
}
