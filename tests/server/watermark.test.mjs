// The watermark extension: completions and chat with {"watermark": {"key",
// "gamma", "delta", "context"}} are detected by POST /v1/watermark/detect
// (z > 8 at temperature 1, delta 4, 200 tokens), plain output and a wrong
// key are not (|z| < 3); an integer key is its decimal text; "tokens" score
// like "text"; out-of-range values are 400 naming the parameter; beam search
// with a watermark is refused.
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import { MODEL_ID, assertCleanExit, client, request, startServer } from "./helpers.mjs";

function assertError(r, status, param) {
    assert.equal(r.status, status, r.text);
    assert.equal(typeof r.json?.error?.message, "string", r.text);
    assert.equal(r.json.error.param, param, r.text);
}

// 200 tokens of plain temperature-1 sampling, never ending early.
const sampled = (extra) => ({ prompt: "Once upon a time", max_tokens: 200, temperature: 1, top_p: 1,
    ignore_eos: true, ...extra });

describe("watermark", () => {
    let server;
    const detect = (body) => request(server, "POST", "/v1/watermark/detect", { body });
    before(async () => { server = await startServer(["--parallel", "2", "--ctx", "512"]); });
    after(async () => assertCleanExit(assert, await server.stop()));

    test("watermarked completions are detected, plain ones and wrong keys are not", async () => {
        const watermark = { key: "server secret", gamma: 0.25, delta: 4 };
        for (const seed of [1, 2, 3]) {
            const marked = await request(server, "POST", "/v1/completions", { body: sampled({ seed, watermark }) });
            assert.equal(marked.status, 200, marked.text);
            const plain = await request(server, "POST", "/v1/completions", { body: sampled({ seed }) });
            assert.equal(plain.status, 200, plain.text);
            const text = marked.json.choices[0].text;
            const d = await detect({ text, key: "server secret" });
            assert.equal(d.status, 200, d.text);
            assert.equal(d.json.object, "watermark.detection");
            assert.ok(d.json.z > 8 && d.json.detected, d.text);
            assert.ok(d.json.p_value < 1e-10, d.text);
            assert.equal(d.json.scored + d.json.repeated, d.json.tokens - 1);
            assert.match(d.json.scoring, /each distinct/);
            const p = await detect({ text: plain.json.choices[0].text, key: "server secret" });
            assert.ok(Math.abs(p.json.z) < 3 && !p.json.detected, p.text);
            const w = await detect({ text, key: "another secret" });
            assert.ok(Math.abs(w.json.z) < 3 && !w.json.detected, w.text);
        }
    });

    test("an integer key is its decimal text; token ids score like the text", async () => {
        const r = await request(server, "POST", "/v1/completions",
            { body: sampled({ seed: 4, watermark: { key: 42, delta: 4, context: 2, gamma: 0.5 } }) });
        assert.equal(r.status, 200, r.text);
        const text = r.json.choices[0].text;
        const d = await detect({ text, key: "42", context: 2, gamma: 0.5, z_threshold: 5 });
        assert.ok(d.json.z > 8 && d.json.detected && d.json.context === 2 && d.json.z_threshold === 5, d.text);
        const toks = await request(server, "POST", "/tokenize", { body: { content: text, add_special: false } });
        const t = await detect({ tokens: toks.json.tokens, key: 42, context: 2, gamma: 0.5 });
        assert.equal(t.json.z, d.json.z, t.text);
        const h1 = await detect({ text, key: 42, context: 1, gamma: 0.5 });
        assert.ok(Math.abs(h1.json.z) < 3, h1.text);
    });

    test("chat through the official client takes the extension", async () => {
        const openai = client(server);
        const r = await openai.chat.completions.create({
            model: MODEL_ID, messages: [{ role: "user", content: "Tell a story" }], max_tokens: 150,
            temperature: 1, seed: 7, ignore_eos: true, watermark: { key: "chat key", delta: 4 },
        });
        const d = await detect({ text: r.choices[0].message.content, key: "chat key" });
        assert.equal(d.status, 200, d.text);
        assert.ok(d.json.z > 6 && d.json.detected, d.text);
    });

    test("out-of-range watermark settings are 400 naming the parameter", async () => {
        const cases = [
            [{ key: "k", gamma: 0 }, "watermark.gamma"], [{ key: "k", gamma: 1 }, "watermark.gamma"],
            [{ key: "k", gamma: -0.2 }, "watermark.gamma"], [{ key: "k", gamma: "x" }, "watermark.gamma"],
            [{ key: "k", delta: -1 }, "watermark.delta"], [{ key: "k", delta: 101 }, "watermark.delta"],
            [{ key: "k", context: 0 }, "watermark.context"], [{ key: "k", context: 9 }, "watermark.context"],
            [{ key: "k", context: 1.5 }, "watermark.context"], [{ key: "" }, "watermark.key"],
            [{ gamma: 0.5 }, "watermark.key"], [{ key: {} }, "watermark.key"], [{ key: 1.5 }, "watermark.key"],
            [{ key: "k", strength: 2 }, "watermark"], ["on", "watermark"], [true, "watermark"],
        ];
        for (const [watermark, param] of cases)
            assertError(await request(server, "POST", "/v1/completions",
                { body: { prompt: "Hi", max_tokens: 2, watermark } }), 400, param);
        assertError(await request(server, "POST", "/v1/completions",
            { body: { prompt: "Hi", max_tokens: 2, beam_width: 2, watermark: { key: "k" } } }), 400, "watermark");
        const ok = await request(server, "POST", "/v1/completions", { body: { prompt: "Hi", max_tokens: 2, watermark: false } });
        assert.equal(ok.status, 200, ok.text);
    });

    test("detection requests are checked", async () => {
        assertError(await detect({ text: "hi" }), 400, "key");
        assertError(await detect({ text: "hi", key: "" }), 400, "key");
        assertError(await detect({ text: "hi", key: "k", gamma: 1 }), 400, "gamma");
        assertError(await detect({ text: "hi", key: "k", context: 9 }), 400, "context");
        assertError(await detect({ key: "k" }), 400, "text");
        assertError(await detect({ text: "hi", tokens: [1], key: "k" }), 400, "text");
        assertError(await detect({ tokens: [1, 512], key: "k" }), 400, "tokens");
        assertError(await detect({ tokens: "1 2", key: "k" }), 400, "tokens");
        assertError(await detect({ text: "hi", key: "k", z_threshold: "4" }), 400, "z_threshold");
        assertError(await detect({ text: "hi", key: "k", delta: 2 }), 400, "delta");
        const empty = await detect({ text: "", key: "k" });
        assert.equal(empty.status, 200, empty.text);
        assert.ok(empty.json.scored === 0 && empty.json.z === 0 && empty.json.p_value === 1 && !empty.json.detected);
    });
});
