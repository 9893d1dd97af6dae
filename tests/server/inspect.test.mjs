// The decoding lab's endpoints (/v1/inspect and /v1/inspect/beam,
// /speculative, /self_consistency) against stories260K: their results agree
// with what the server's own generation gives, stepping one token at a time
// equals one run, streams carry the same events, and bad input is a 400 in
// the OpenAI error shape.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { startServer, request, assertCleanExit } from "./helpers.mjs";

let server;
before(async () => { server = await startServer(); });
after(async () => { assertCleanExit(assert, await server.stop()); });

const post = (path, body) => request(server, "POST", path, { body });
const events = (r) => r.json.events;

// The data: objects of a server-sent event stream, without [DONE].
function sse(text) {
    assert.match(text, /data: \[DONE\]\n\n$/);
    return text.split("\n\n").filter((b) => b.startsWith("data: ") && b !== "data: [DONE]").map((b) => JSON.parse(b.slice(6)));
}

test("inspect: greedy steps are the server's greedy completion, stage by stage", async () => {
    const prompt = "Once upon a time";
    const r = await post("/v1/inspect", { prompt, max_tokens: 12, temperature: 0, top_n: 5 });
    assert.equal(r.status, 200, r.text);
    assert.equal(r.json.object, "nucleus.inspect");
    const steps = events(r).filter((e) => e.type === "step");
    const done = events(r).at(-1);
    assert.equal(done.type, "done");
    assert.equal(steps.length, 12);
    const c = await post("/v1/completions", { prompt, max_tokens: 12, temperature: 0 });
    assert.equal(steps.map((s) => s.chosen.text).join(""), c.json.choices[0].text);
    for (const s of steps) {
        assert.equal(s.chosen.token, s.greedy.token);
        const raw = s.stages[0];
        assert.equal(raw.stage, "raw");
        assert.equal(raw.kept, 512);
        assert.equal(raw.top.length, 5);
        assert.equal(raw.top[0].token, s.chosen.token, "greedy takes the most likely token");
        for (let i = 1; i < raw.top.length; i++) assert.ok(raw.top[i].prob <= raw.top[i - 1].prob);
        const sum = raw.curve.at(-1);
        assert.ok(sum > 0.99 && sum <= 1, `the curve reaches 1 (${sum})`);
        assert.ok(s.entropy >= 0);
        assert.ok(Math.abs(Math.log(s.chosen.model_prob) - s.chosen.logprob) < 1e-4);
    }
});

test("inspect: the filters keep what their definitions say", async () => {
    const r = await post("/v1/inspect", { prompt: "Once upon a time, there was a", max_tokens: 3, temperature: 1,
        top_k: 7, top_p: 0.6, seed: 5, top_n: 20, curve_points: 600 });
    assert.equal(r.status, 200, r.text);
    for (const s of events(r).filter((e) => e.type === "step")) {
        const names = s.stages.map((x) => x.stage);
        const raw = s.stages[0];
        const k = s.stages.find((x) => x.stage === "top_k");
        if (k) assert.equal(k.kept, 7);
        const i = names.indexOf("top_p");
        if (i > 0) {
            // the nucleus: the fewest most likely tokens whose mass reaches p
            const input = s.stages[i - 1].curve;
            const kept = s.stages[i].kept;
            assert.ok(input[kept - 1] >= 0.6 - 1e-4, "the kept tokens reach p");
            if (kept > 1) assert.ok(input[kept - 2] < 0.6 + 1e-4, "one fewer would not");
        }
        const last = s.stages.at(-1);
        assert.ok(last.kept <= 7);
        assert.ok(last.top.some((x) => x.token === s.chosen.token), "the token drawn survived the chain");
        assert.ok(raw.kept >= last.kept);
    }
});

test("inspect: one step at a time gives the tokens of one run; back is a shorter request", async () => {
    const body = { prompt: "Lily and Ben", temperature: 0.9, top_k: 40, seed: 11, repetition_penalty: 1.2 };
    const run = events(await post("/v1/inspect", { ...body, max_tokens: 6 })).filter((e) => e.type === "step");
    const tokens = [];
    for (let i = 0; i < 6; i++) {
        const r = await post("/v1/inspect", { ...body, tokens, max_tokens: 1 });
        assert.equal(r.status, 200, r.text);
        const s = events(r)[0];
        assert.equal(s.index, i);
        assert.equal(s.chosen.token, run[i].chosen.token, `step ${i}`);
        tokens.push(s.chosen.token);
    }
    const back = events(await post("/v1/inspect", { ...body, tokens: tokens.slice(0, 3), max_tokens: 1 }))[0];
    assert.equal(back.chosen.token, run[3].chosen.token);
});

test("inspect: penalties show the logits they moved; the stream has the same events", async () => {
    const body = { prompt: "Once upon a time", max_tokens: 8, temperature: 0, repetition_penalty: 1.5, seed: 1 };
    const whole = events(await post("/v1/inspect", body));
    const changed = whole.filter((e) => e.type === "step").flatMap((s) => s.stages.filter((x) => x.stage === "penalties"));
    assert.ok(changed.length > 0, "the penalty moved logits once tokens repeat");
    for (const st of changed)
        for (const c of st.changed)
            assert.ok(Math.abs(c.after - (c.before > 0 ? c.before / 1.5 : c.before * 1.5)) < 1e-3, "CTRL's rule");
    const r = await request(server, "POST", "/v1/inspect", { body: { ...body, stream: true } });
    assert.equal(r.status, 200);
    assert.match(r.headers["content-type"], /text\/event-stream/);
    assert.deepEqual(sse(r.text), whole);
});

test("inspect: a grammar's mask and the watermark's running z-score", async () => {
    const g = events(await post("/v1/inspect", { prompt: "Answer:", max_tokens: 8, choice: [" yes", " no"], temperature: 0 }));
    const steps = g.filter((e) => e.type === "step");
    assert.ok(steps[0].mask.allowed > 0 && steps[0].mask.allowed < 512);
    assert.equal(steps[0].mask.allowed + steps[0].mask.refused, 512);
    const text = steps.map((s) => s.chosen.text).join("");
    assert.ok([" yes", " no"].includes(text), `the choice grammar held: '${text}'`);
    assert.equal(g.at(-1).finish, "stop");
    const forced = await post("/v1/inspect", { prompt: "Answer:", choice: [" yes", " no"], tokens: [2], max_tokens: 1 });
    assert.equal(forced.status, 400, "a sent token the grammar refuses");

    const key = "lab-test";
    const w = events(await post("/v1/inspect", { prompt: "Once upon a time", max_tokens: 30, seed: 3, watermark: { key, delta: 4 } }));
    const ws = w.filter((e) => e.type === "step");
    const toks = ws.map((s) => s.chosen.token);
    const det = await post("/v1/watermark/detect", { tokens: toks, key });
    assert.equal(det.status, 200, det.text);
    assert.ok(Math.abs(ws.at(-1).watermark.z - det.json.z) < 1e-3, "the running z ends at the detector's z");
    assert.equal(ws.at(-1).watermark.green_count, det.json.green);
    assert.ok(ws.filter((s) => s.watermark.green).length > ws.length / 2, "δ 4 makes most tokens green");
});

test("beam: the lab's hypotheses are the server's beam search", async () => {
    const prompt = "Once upon a time";
    const r = await post("/v1/inspect/beam", { prompt, beam_width: 3, max_tokens: 12 });
    assert.equal(r.status, 200, r.text);
    const ev = events(r);
    const done = ev.at(-1);
    const c = await post("/v1/completions", { prompt, beam_width: 3, n: 3, max_tokens: 12 });
    assert.deepEqual(done.hypotheses.map((h) => h.text), c.json.choices.map((x) => x.text));
    // the tree: every node's parent came before it; live nodes per step <= width
    const seen = new Set([0]);
    for (const st of ev.filter((e) => e.type === "beam_step")) {
        for (const n of st.nodes) { assert.ok(seen.has(n.parent)); seen.add(n.id); }
        assert.ok(st.nodes.filter((n) => n.status === "live").length <= 3);
    }
    for (const h of done.hypotheses) assert.ok(Math.abs(h.score - h.sum_logprob / h.tokens.length) < 1e-4, "α 1: mean log-prob");
});

test("speculative: greedy output is plain greedy decoding, with lookup and with the model itself", async () => {
    const prompt = "Once upon a time";
    const plain = await post("/v1/completions", { prompt, max_tokens: 40, temperature: 0 });
    for (const draft of ["lookup", "self"]) {
        const r = await post("/v1/inspect/speculative", { prompt, max_tokens: 40, temperature: 0, draft, draft_max: 4 });
        assert.equal(r.status, 200, r.text);
        const ev = events(r), done = ev.at(-1);
        const passes = ev.filter((e) => e.type === "pass");
        const text = passes.flatMap((p) => p.emitted.map((t) => t.text)).join("");
        assert.equal(text, plain.json.choices[0].text, draft);
        assert.equal(done.same_as_plain, true);
        assert.equal(done.target_passes, passes.length);
        assert.equal(done.accepted, passes.reduce((a, p) => a + p.accepted, 0));
        if (draft === "self") assert.equal(done.accepted, done.drafted, "the model agrees with itself");
        assert.ok(done.timing.plain_ms > 0 && done.timing.speculative_ms > 0);
    }
    const bad = await post("/v1/inspect/speculative", { prompt, draft: "model" });
    assert.equal(bad.status, 400);
    assert.equal(bad.json.error.param, "draft");
});

test("self-consistency: paths stream and the vote is the majority of their answers", async () => {
    const r = await request(server, "POST", "/v1/inspect/self_consistency", {
        body: { prompt: "Once upon a time", paths: 4, max_tokens: 12, seed: 9, answer_pattern: "[A-Z][a-z]+", stream: true } });
    assert.equal(r.status, 200, r.text);
    const ev = sse(r.text), done = ev.at(-1);
    assert.equal(done.paths.length, 4);
    for (const p of done.paths)
        assert.equal(ev.filter((e) => e.type === "path_text" && e.index === p.index).map((e) => e.text).join(""), p.text);
    const counts = {};
    for (const p of done.paths) if (p.answer !== null) counts[p.answer] = (counts[p.answer] || 0) + 1;
    assert.equal(done.votes, Math.max(...Object.values(counts)));
    assert.equal(counts[done.answer], done.votes);
});

test("bad input is a 400 naming the field", async () => {
    const cases = [
        ["/v1/inspect", { prompt: "x", temprature: 1 }, "temprature"],
        ["/v1/inspect", { prompt: "x", top_n: 0 }, "top_n"],
        ["/v1/inspect", { prompt: "x", tokens: [1, 512] }, "tokens"],
        ["/v1/inspect", { prompt: "x", max_tokens: 100000 }, "max_tokens"],
        ["/v1/inspect", { prompt: "x", temperature: 3 }, "temperature"],
        ["/v1/inspect", { prompt: "x", sampler_order: "top_k,nope" }, "sampler_order"],
        ["/v1/inspect", { prompt: "x", n: 2 }, "n"],
        ["/v1/inspect", { prompt: "x", regex: "(" }, "regex"],
        ["/v1/inspect", { tokens: [1] }, "prompt"],
        ["/v1/inspect/beam", { prompt: "x", temperature: 0.5 }, "temperature"],
        ["/v1/inspect/beam", { prompt: "x", beam_width: 9 }, "beam_width"],
        ["/v1/inspect/speculative", { prompt: "x", draft_max: 0 }, "draft_max"],
        ["/v1/inspect/speculative", { prompt: "x", draft: "other" }, "draft"],
        ["/v1/inspect/self_consistency", { prompt: "x", paths: 1 }, "paths"],
        ["/v1/inspect/self_consistency", { prompt: "x", answer_pattern: "(" }, "answer_pattern"],
        ["/v1/inspect/self_consistency", { prompt: [1, 2, 3] }, "prompt"],
    ];
    for (const [path, body, param] of cases) {
        const r = await post(path, body);
        assert.equal(r.status, 400, `${path} ${JSON.stringify(body)}: ${r.text}`);
        assert.equal(r.json.error.type, "invalid_request_error");
        assert.equal(r.json.error.param, param, `${path} ${JSON.stringify(body)}: ${r.text}`);
    }
    const notJson = await request(server, "POST", "/v1/inspect", { body: "{nope" });
    assert.equal(notJson.status, 400);
    assert.equal((await request(server, "GET", "/v1/inspect")).status, 405);
});
