// Continuous batching: 16 seeded streaming requests at once all complete,
// and each one's text is exactly the text of the same request run alone.
// Also a conversation's cached prefix is reused by its next turn, with the
// same text as a cold run.
import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { MODEL_ID, assertCleanExit, client, collectStream, request, startServer, withTimeout } from "./helpers.mjs";

const N = 16;
let server, openai;
before(async () => {
    server = await startServer(["--parallel", "8", "--ctx", "512"]);
    openai = client(server);
});
after(async () => assertCleanExit(assert, await server.stop()));

const prompts = ["Once upon a time", "The little dog", "Tom and Lily", "One day, a bird", "The sun was"];

// Request i: chat or completion, its own prompt, seed and length.
function args(i) {
    const base = { model: MODEL_ID, max_tokens: 24 + 5 * (i % 7), temperature: 0.9, top_p: 0.95, seed: 1000 + i };
    return i % 2
        ? { kind: "chat", body: { ...base, messages: [{ role: "user", content: prompts[i % prompts.length] }] } }
        : { kind: "completion", body: { ...base, prompt: prompts[i % prompts.length] } };
}

async function run(i) {
    const { kind, body } = args(i);
    const stream = kind === "chat"
        ? await openai.chat.completions.create({ ...body, stream: true, stream_options: { include_usage: true } })
        : await openai.completions.create({ ...body, stream: true, stream_options: { include_usage: true } });
    const s = await collectStream(stream, kind);
    assert.ok(s.finish[0], `request ${i} has a finish reason`);
    assert.ok(s.usage && s.usage.completion_tokens > 0, `request ${i} has usage`);
    return s.texts[0];
}

test(`${N} simultaneous streams: all complete, each equal to its solo run`, async () => {
    const alone = [];
    for (let i = 0; i < N; i++) alone.push(await withTimeout(run(i), 60000, `solo ${i}`));
    const together = await withTimeout(Promise.all(Array.from({ length: N }, (_, i) => run(i))), 120000, "concurrent");
    for (let i = 0; i < N; i++) assert.equal(together[i], alone[i], `request ${i} differs when batched`);
    assert.ok(new Set(alone).size > N / 2, "the requests produce different texts");
    const m = await request(server, "GET", "/metrics");
    // batches of more than one sample happened
    const buckets = [...m.text.matchAll(/^nucleus_batch_samples_bucket\{le="([^"]+)"\} (\d+)/gm)];
    const le1 = Number(buckets.find((b) => b[1] === "1")[2]), all = Number(buckets.find((b) => b[1] === "+Inf")[2]);
    assert.ok(all > le1, "no step ever ran more than one sample");
});

test("a second turn of a conversation gives the same text as a cold run", async () => {
    const msgs = [{ role: "user", content: "Tell me about a cat." }];
    const first = await openai.chat.completions.create({ model: MODEL_ID, messages: msgs, max_tokens: 20, temperature: 0 });
    const turn2 = [...msgs, first.choices[0].message, { role: "user", content: "And then?" }];
    const warm = await openai.chat.completions.create({ model: MODEL_ID, messages: turn2, max_tokens: 20, temperature: 0 });
    // the first turn's prompt and answer were not computed again
    assert.ok(warm.usage.prompt_tokens_details.cached_tokens >= first.usage.prompt_tokens,
        `cached ${warm.usage.prompt_tokens_details.cached_tokens} of ${warm.usage.prompt_tokens}`);
    const cold = await startServer(["--parallel", "1", "--ctx", "512"]);
    try {
        const r = await client(cold).chat.completions.create({ model: MODEL_ID, messages: turn2, max_tokens: 20, temperature: 0 });
        assert.equal(warm.choices[0].message.content, r.choices[0].message.content);
    } finally {
        assertCleanExit(assert, await cold.stop());
    }
});

test("n > 1 while other streams run", async () => {
    const many = Array.from({ length: 6 }, (_, i) => run(i));
    const r = await openai.completions.create({ model: MODEL_ID, prompt: "Once upon a time", max_tokens: 16, n: 4, seed: 5 });
    assert.equal(r.choices.length, 4);
    await Promise.all(many);
});
