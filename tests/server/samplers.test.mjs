// The samplers of llama.cpp's server, by its field names (dry_*, xtc_*,
// top_n_sigma, dynatemp_*, mirostat*), and the bans (banned_strings,
// banned_tokens): accepted on both endpoints and through the official
// client, effective (greedy text with a banned string never holds it,
// streamed or not; a banned token is never generated; DRY changes a
// repetitive greedy text), reproducible with a seed, and every out-of-range
// value a 400 that names the field (never clamped).
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import { MODEL_ID, assertCleanExit, client, collectStream, request, startServer } from "./helpers.mjs";

function assertError(r, param) {
    assert.equal(r.status, 400, r.text);
    assert.equal(typeof r.json?.error?.message, "string", r.text);
    assert.equal(r.json.error.param, param, r.text);
}

// Greedy continuations of the story prompt: "..., there was a little girl
// named Lily. She loved to play outside in the park. ..." (llama.cpp's).
const greedy = (extra) => ({ prompt: "Once upon a time", max_tokens: 60, temperature: 0, ...extra });
const complete = (server, body) => request(server, "POST", "/v1/completions", { body });

describe("samplers", () => {
    let server;
    before(async () => { server = await startServer(["--parallel", "2", "--ctx", "512"]); });
    after(async () => assertCleanExit(assert, await server.stop()));

    test("every sampler field is accepted, on both endpoints", async () => {
        const fields = {
            dry_multiplier: 0.8, dry_base: 1.75, dry_allowed_length: 2, dry_penalty_last_n: -1,
            dry_sequence_breakers: ["\n", ":", "\"", "*"], xtc_probability: 0.5, xtc_threshold: 0.1,
            top_n_sigma: 1.5, dynatemp_range: 0.3, dynatemp_exponent: 1.2, mirostat: 0,
            mirostat_tau: 5, mirostat_eta: 0.1, banned_strings: ["dragon"], banned_tokens: [7, [5, 6]],
        };
        const c = await complete(server, { prompt: "Once upon a time", max_tokens: 12, seed: 3, ...fields });
        assert.equal(c.status, 200, c.text);
        assert.equal(c.json.usage.completion_tokens > 0, true);
        const chat = await request(server, "POST", "/v1/chat/completions",
            { body: { messages: [{ role: "user", content: "Hi" }], max_tokens: 8, ...fields, mirostat: 2 } });
        assert.equal(chat.status, 200, chat.text);
        // null is absent, as for the OpenAI fields
        const n = await complete(server, { prompt: "a", max_tokens: 2, mirostat: null, banned_strings: null });
        assert.equal(n.status, 200, n.text);
    });

    test("a banned string never appears, however it would be spelt; streamed too", async () => {
        const plain = await complete(server, greedy());
        assert.equal(plain.status, 200, plain.text);
        assert.match(plain.json.choices[0].text, /Lily/);
        assert.match(plain.json.choices[0].text, / park/);
        const banned_strings = ["Lily", " park"];
        const r = await complete(server, greedy({ banned_strings }));
        assert.equal(r.status, 200, r.text);
        const text = r.json.choices[0].text;
        assert.ok(text.length > 20, text);
        assert.doesNotMatch(text, /Lily| park/);
        const stream = await client(server).completions.create({ model: MODEL_ID, ...greedy({ banned_strings }), stream: true });
        const got = await collectStream(stream, "completion");
        assert.equal(got.texts[0], text);
        // sampled, several seeds: never either
        for (const seed of [1, 2, 3]) {
            const s = await complete(server, { prompt: "Lily and Tom went to the park.", max_tokens: 80,
                temperature: 1, seed, banned_strings });
            assert.equal(s.status, 200, s.text);
            assert.doesNotMatch(s.json.choices[0].text, /Lily| park/);
        }
        // chat through the official client, which sends the extra field as is
        const cr = await client(server).chat.completions.create({ model: MODEL_ID, temperature: 0, max_tokens: 40,
            messages: [{ role: "user", content: "Tell me about Lily" }], banned_strings: ["Lily"] });
        assert.doesNotMatch(cr.choices[0].message.content, /Lily/);
    });

    test("a banned token is never generated; a banned sequence only after its start", async () => {
        // the ids of the greedy continuation: the tokens of prompt + text after the prompt's
        const plain = await complete(server, greedy({ max_tokens: 20, logprobs: 0 }));
        const tokenize = async (content) => (await request(server, "POST", "/tokenize",
            { body: { content, add_special: false } })).json.tokens;
        const prompt = await tokenize("Once upon a time");
        const ids = (await tokenize("Once upon a time" + plain.json.choices[0].text)).slice(prompt.length);
        const lp = (r) => r.json.choices[0].logprobs.token_logprobs;
        // banned, the first token is another one (another log-prob), whatever its text
        const r = await complete(server, greedy({ max_tokens: 20, logprobs: 0, banned_tokens: [ids[0]] }));
        assert.equal(r.status, 200, r.text);
        assert.notEqual(lp(r)[0], lp(plain)[0]);
        // the sequence (first, second): the first token stays, the second is another
        const s = await complete(server, greedy({ max_tokens: 20, logprobs: 0, banned_tokens: [[ids[0], ids[1]]] }));
        assert.equal(s.status, 200, s.text);
        assert.equal(lp(s)[0], lp(plain)[0]);
        assert.notEqual(lp(s)[1], lp(plain)[1]);
    });

    test("DRY changes a repetitive greedy text; the same seed gives the same text", async () => {
        const plain = await complete(server, greedy({ max_tokens: 100 }));
        const dry = { dry_multiplier: 2, dry_base: 1.75, dry_allowed_length: 2, dry_penalty_last_n: -1 };
        const a = await complete(server, greedy({ max_tokens: 100, ...dry }));
        assert.equal(a.status, 200, a.text);
        assert.notEqual(a.json.choices[0].text, plain.json.choices[0].text);
        for (const extra of [dry, { xtc_probability: 0.5, xtc_threshold: 0.1 }, { mirostat: 1, mirostat_tau: 3 },
            { mirostat: 2, mirostat_tau: 3 }, { top_n_sigma: 1 }, { dynatemp_range: 0.5 }]) {
            const body = { prompt: "Once upon a time", max_tokens: 30, temperature: 0.9, seed: 11, ...extra };
            const x = await complete(server, body), y = await complete(server, body);
            assert.equal(x.status, 200, x.text);
            assert.equal(x.json.choices[0].text, y.json.choices[0].text, JSON.stringify(extra));
        }
    });

    test("out-of-range values are 400 naming the field, never clamped", async () => {
        const bad = [
            ["dry_multiplier", -1], ["dry_multiplier", 101], ["dry_base", 0.5], ["dry_allowed_length", -1],
            ["dry_allowed_length", 1.5], ["dry_penalty_last_n", -2], ["dry_sequence_breakers", "\n"],
            ["dry_sequence_breakers", [""]], ["dry_sequence_breakers", ["x".repeat(41)]], ["dry_sequence_breakers", [1]],
            ["xtc_probability", 1.5], ["xtc_threshold", -0.1], ["top_n_sigma", -2], ["top_n_sigma", "1"],
            ["dynatemp_range", -0.5], ["dynatemp_exponent", 101], ["mirostat", 3], ["mirostat", 1.5],
            ["mirostat_tau", -1], ["mirostat_eta", 2], ["banned_strings", "Lily"], ["banned_strings", [""]],
            ["banned_strings", Array(65).fill("a")], ["banned_tokens", [-1]], ["banned_tokens", [[]]],
            ["banned_tokens", [100000]], ["banned_tokens", ["a"]], ["banned_tokens", 5],
        ];
        for (const [name, value] of bad) {
            const r = await complete(server, { prompt: "a", max_tokens: 2, [name]: value });
            assertError(r, name);
        }
        // bans cannot be kept by beam search, which draws nothing
        assertError(await complete(server, { prompt: "a", max_tokens: 4, beam_width: 2, banned_strings: ["x"] }),
            "banned_strings");
    });
});
