// Speculative decoding in the server (--draft MODEL, --lookup): many greedy
// streams at once give exactly the text of a server without speculation;
// a request may opt out ("speculative": false) or cap its draft length
// ("draft_max"); bad values are 400s naming the field; /metrics counts the
// drafted and accepted tokens; a draft with another vocabulary, or draft
// options without a draft, stop the server at start-up with a clear message.
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { after, before, describe, test } from "node:test";
import {
    MODEL, MODEL_ID, NUCLEUS, SHARED, assertCleanExit, client, collectStream, request, startServer, withTimeout,
} from "./helpers.mjs";

const N = 10;
const prompts = ["Once upon a time", "The little dog", "Tom and Lily", "One day, a bird", "The sun was",
    "Lily wanted to play", "There was a big tree"];
const tmp = fs.mkdtempSync(path.join(os.tmpdir(), "nucleus-spec-"));
const DRAFT = path.join(tmp, "draft-q8_0.gguf");

// The draft: a q8_0 copy of the model made by nucleus itself.
function makeDraft() {
    const r = spawnSync(NUCLEUS, ["quantize", MODEL, DRAFT, "q8_0"], { encoding: "utf8", timeout: 60000 });
    assert.equal(r.status, 0, r.stderr);
}

// Request i: chat or completion, greedy, its own prompt and length.
function body(i, extra = {}) {
    const base = { model: MODEL_ID, max_tokens: 30 + 7 * (i % 5), temperature: 0, ...extra };
    return i % 2
        ? { kind: "chat", body: { ...base, messages: [{ role: "user", content: prompts[i % prompts.length] }] } }
        : { kind: "completion", body: { ...base, prompt: prompts[i % prompts.length] } };
}

async function stream(openai, i, extra) {
    const { kind, body: b } = body(i, extra);
    const opts = { ...b, stream: true, stream_options: { include_usage: true } };
    const s = await collectStream(kind === "chat"
        ? await openai.chat.completions.create(opts) : await openai.completions.create(opts), kind);
    assert.ok(s.finish[0], `request ${i} has a finish reason`);
    assert.ok(s.usage?.completion_tokens > 0, `request ${i} has usage`);
    return s.texts[0];
}

// N streams at once; their texts in order.
const together = (openai, extra) =>
    withTimeout(Promise.all(Array.from({ length: N }, (_, i) => stream(openai, i, extra))), 120000, "concurrent streams");

// A counter of /metrics.
async function counter(server, name) {
    const m = await request(server, "GET", "/metrics");
    const hit = m.text.match(new RegExp(`^${name} (\\d+)$`, "m"));
    assert.ok(hit, `${name} in /metrics`);
    return Number(hit[1]);
}

function assertError(r, param) {
    assert.equal(r.status, 400, r.text);
    assert.equal(r.json?.error?.type, "invalid_request_error", r.text);
    assert.equal(r.json.error.param, param, r.text);
    assert.ok(r.json.error.message.length > 0);
}

after(() => fs.rmSync(tmp, { recursive: true, force: true }));

describe("speculative decoding", () => {
    let plain, draft, lookup, expected;
    before(async () => {
        makeDraft();
        const common = ["--parallel", "8", "--ctx", "512"];
        [plain, draft, lookup] = await Promise.all([
            startServer(common),
            startServer([...common, "--draft", DRAFT, "--draft-max", "6"]),
            startServer([...common, "--lookup"]),
        ]);
        expected = await together(client(plain));
        assert.ok(new Set(expected).size > N / 2, "the requests produce different texts");
    });
    after(async () => {
        for (const s of [plain, draft, lookup]) if (s) assertCleanExit(assert, await s.stop());
    });

    test(`${N} greedy streams with a draft model: the same text as without`, async () => {
        const drafted0 = await counter(draft, "nucleus_draft_tokens_total");
        const texts = await together(client(draft));
        for (let i = 0; i < N; i++) assert.equal(texts[i], expected[i], `request ${i} differs with --draft`);
        const drafted = await counter(draft, "nucleus_draft_tokens_total") - drafted0;
        const accepted = await counter(draft, "nucleus_draft_tokens_accepted_total");
        assert.ok(drafted > 0, "nothing was drafted");
        assert.ok(accepted > drafted / 2, `a q8_0 copy mostly agrees: ${accepted} of ${drafted}`);
        assert.ok(await counter(draft, "nucleus_draft_model_batches_total") > 0);
    });

    test(`${N} greedy streams with prompt lookup: the same text as without`, async () => {
        const texts = await together(client(lookup));
        for (let i = 0; i < N; i++) assert.equal(texts[i], expected[i], `request ${i} differs with --lookup`);
        assert.ok(await counter(lookup, "nucleus_draft_tokens_total") > 0, "nothing was drafted");
    });

    test('"speculative": false drafts nothing, "draft_max" caps the draft; the text stays', async () => {
        const openai = client(draft);
        const before = await counter(draft, "nucleus_draft_tokens_total");
        assert.equal(await stream(openai, 0, { speculative: false }), expected[0]);
        assert.equal(await stream(openai, 1, { speculative: false }), expected[1]);
        assert.equal(await counter(draft, "nucleus_draft_tokens_total"), before, "an opted-out request drafted");
        assert.equal(await stream(openai, 2, { draft_max: 1, speculative: true }), expected[2]);
        assert.equal(await stream(openai, 3, { draft_max: 6 }), expected[3]);
        assert.ok(await counter(draft, "nucleus_draft_tokens_total") > before);
        // a non-streaming answer is the same text too
        const { body: b } = body(4, { draft_max: 3 });
        const r = await openai.completions.create(b);
        assert.equal(r.choices[0].text, expected[4]);
        // usage reports the draft tokens kept and refused; an opted-out request has none
        const d = r.usage.completion_tokens_details;
        assert.ok(d && d.accepted_prediction_tokens + d.rejected_prediction_tokens > 0, JSON.stringify(r.usage));
        assert.ok(d.accepted_prediction_tokens <= r.usage.completion_tokens);
        const off = await openai.completions.create(body(4, { speculative: false }).body);
        assert.equal(off.usage.completion_tokens_details, undefined, JSON.stringify(off.usage));
    });

    test("bad speculation fields are 400s naming the field", async () => {
        const post = (server, extra) =>
            request(server, "POST", "/v1/completions", { body: { prompt: "Hi", max_tokens: 2, ...extra } });
        for (const v of [0, 7, -1, 2.5, "3", true, 1e10])
            assertError(await post(draft, { draft_max: v }), "draft_max");
        for (const v of ["no", 0, 1, []])
            assertError(await post(draft, { speculative: v }), "speculative");
        assertError(await post(draft, { speculative: false, draft_max: 2 }), "draft_max");
        // a server without speculation says so rather than ignoring the request
        assertError(await post(plain, { speculative: true }), "speculative");
        assertError(await post(plain, { draft_max: 2 }), "draft_max");
        assert.equal((await post(plain, { speculative: false })).status, 200);
        assert.equal((await post(draft, { speculative: null, draft_max: null })).status, 200);
    });
});

describe("speculative decoding: start-up errors", () => {
    const serve = (args) => spawnSync(NUCLEUS, ["serve", "-m", MODEL, "--port", "0", ...args],
        { encoding: "utf8", timeout: 60000 });

    test("a draft with another vocabulary is refused at start", () => {
        const other = path.join(tmp, "other-vocab.gguf");
        const py = spawnSync("python3", [path.join(SHARED, "tools/synth_gguf.py"), "--shape", "tiny",
            "--vocab-from", path.join(SHARED, "vocab/ggml-vocab-llama-spm.gguf"), "-o", other],
        { encoding: "utf8", timeout: 120000 });
        assert.equal(py.status, 0, py.stderr);
        const r = serve(["--draft", other]);
        assert.equal(r.status, 1, r.stderr);
        assert.match(r.stderr, /--draft .* cannot serve this model: .*vocabular/);
    });

    test("draft options that make no sense are refused", () => {
        for (const [args, re] of [
            [["--draft-max", "4"], /need --draft MODEL or --lookup/],
            [["--lookup", "--draft", MODEL], /--draft or --lookup, not both/],
            [["--lookup", "--draft-min", "5", "--draft-max", "3"], /--draft-min 5 is above --draft-max 3/],
            [["--lookup", "--draft-max", "65"], /draft-max/],
            [["--draft", path.join(tmp, "missing.gguf")], /missing\.gguf/],
        ]) {
            const r = serve(args);
            assert.notEqual(r.status, 0, `${args.join(" ")} was accepted`);
            assert.match(r.stderr, re);
        }
        // the batch must hold a full draft
        const r = serve(["--lookup", "--draft-max", "8", "--batch", "8"]);
        assert.equal(r.status, 1, r.stderr);
        assert.match(r.stderr, /draft length/);
    });
});
