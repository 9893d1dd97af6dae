// The OpenAI API through the official client: chat and completions,
// streaming and not, n > 1, stop strings, log-probs, seeds, echo, best_of,
// beam search, models, tokenize / detokenize, metrics, constrained output.
import assert from "node:assert/strict";
import fs from "node:fs";
import path from "node:path";
import { after, before, describe, test } from "node:test";
import {
    MODEL_ID, SHARED, assertCleanExit, client, collectStream, request, startServer,
} from "./helpers.mjs";

let server, openai;
before(async () => {
    server = await startServer(["--parallel", "4", "--ctx", "512"]);
    openai = client(server);
});
after(async () => assertCleanExit(assert, await server.stop()));

const chatMsgs = [{ role: "user", content: "Tell me a story about a cat." }];
// The token counts of a usage object (cached_tokens depends on what ran before).
const tokenCounts = (u) => [u.prompt_tokens, u.completion_tokens, u.total_tokens];

describe("completions", () => {
    test("greedy text continues the prompt, with usage", async () => {
        const r = await openai.completions.create({ model: MODEL_ID, prompt: "Once upon a time", max_tokens: 20, temperature: 0 });
        assert.equal(r.object, "text_completion");
        assert.match(r.id, /^cmpl-/);
        assert.equal(r.model, MODEL_ID);
        assert.equal(r.choices.length, 1);
        assert.ok(r.choices[0].text.startsWith(", there was"), r.choices[0].text);
        assert.equal(r.choices[0].finish_reason, "length");
        assert.equal(r.usage.prompt_tokens, 5);
        assert.equal(r.usage.completion_tokens, 20);
        assert.equal(r.usage.total_tokens, 25);
        assert.ok(r.usage.prompt_tokens_details.cached_tokens <= 4, "at least the last prompt token is computed");
    });

    test("the model field may be left out, and max_tokens defaults to 16", async () => {
        const r = await request(server, "POST", "/v1/completions", { body: { prompt: "Once upon a time", temperature: 0 } });
        assert.equal(r.status, 200);
        assert.equal(r.json.usage.completion_tokens, 16);
    });

    test("streaming gives the same text as one response, then [DONE]", async () => {
        const args = { model: MODEL_ID, prompt: "The dog", max_tokens: 40, temperature: 0 };
        const whole = await openai.completions.create(args);
        const s = await collectStream(await openai.completions.create({ ...args, stream: true,
            stream_options: { include_usage: true } }), "completion");
        assert.equal(s.texts[0], whole.choices[0].text);
        assert.equal(s.finish[0], whole.choices[0].finish_reason);
        assert.deepEqual(tokenCounts(s.usage), tokenCounts(whole.usage));
        const raw = await request(server, "POST", "/v1/completions", { body: { ...args, stream: true } });
        assert.equal(raw.status, 200);
        assert.match(raw.headers["content-type"], /text\/event-stream/);
        assert.ok(raw.text.trimEnd().endsWith("data: [DONE]"));
    });

    test("token-id prompts and lists of prompts", async () => {
        const tok = await request(server, "POST", "/tokenize", { body: { content: "Once upon a time", add_special: true } });
        assert.deepEqual(tok.json.tokens.length, 5);
        const byText = await openai.completions.create({ model: MODEL_ID, prompt: "Once upon a time", max_tokens: 12, temperature: 0 });
        const byIds = await openai.completions.create({ model: MODEL_ID, prompt: tok.json.tokens, max_tokens: 12, temperature: 0 });
        assert.equal(byIds.choices[0].text, byText.choices[0].text);
        const many = await openai.completions.create({ model: MODEL_ID, prompt: ["Once upon a time", "The cat"], max_tokens: 8, temperature: 0, n: 2 });
        assert.equal(many.choices.length, 4);
        assert.deepEqual(many.choices.map((c) => c.index), [0, 1, 2, 3]);
        assert.equal(many.choices[0].text, many.choices[1].text, "greedy samples of one prompt agree");
        assert.notEqual(many.choices[0].text, many.choices[2].text);
        const ids = await openai.completions.create({ model: MODEL_ID, prompt: [tok.json.tokens, tok.json.tokens], max_tokens: 4, temperature: 0 });
        assert.equal(ids.choices.length, 2);
    });

    test("echo puts the prompt first", async () => {
        const r = await openai.completions.create({ model: MODEL_ID, prompt: "Once upon a time", max_tokens: 5, temperature: 0, echo: true });
        assert.ok(r.choices[0].text.startsWith("Once upon a time,"), r.choices[0].text);
    });

    test("logprobs: tokens, token_logprobs, top_logprobs dicts, text_offset", async () => {
        const r = await openai.completions.create({ model: MODEL_ID, prompt: "Once upon a time", max_tokens: 6, temperature: 0, logprobs: 3 });
        const lp = r.choices[0].logprobs;
        assert.equal(lp.tokens.length, 6);
        assert.equal(lp.token_logprobs.length, 6);
        assert.equal(lp.top_logprobs.length, 6);
        assert.equal(lp.text_offset.length, 6);
        assert.equal(lp.tokens.join(""), r.choices[0].text);
        for (let i = 0; i < 6; i++) {
            assert.ok(lp.token_logprobs[i] <= 0);
            const top = lp.top_logprobs[i];
            assert.ok(Object.keys(top).length >= 1 && Object.keys(top).length <= 3);
            // greedy: the chosen token is the most likely one
            assert.ok(Math.abs(Math.max(...Object.values(top)) - lp.token_logprobs[i]) < 1e-5);
            assert.equal(r.choices[0].text.slice(lp.text_offset[i], lp.text_offset[i] + lp.tokens[i].length), lp.tokens[i]);
        }
        const echo = await openai.completions.create({ model: MODEL_ID, prompt: "Once upon a time", max_tokens: 2, temperature: 0, logprobs: 1, echo: true });
        assert.equal(echo.choices[0].logprobs.tokens.length, 5 + 2);
        assert.equal(echo.choices[0].logprobs.token_logprobs[0], null);
    });

    // lm-evaluation-harness's loglikelihood requests (its OpenAI-completions
    // client, tokenized requests): token-id prompts context + continuation,
    // echo, logprobs 1, temperature 0, max_tokens 1 (0 in older versions);
    // it sums token_logprobs[ctxlen:-1] and calls the continuation greedy when
    // each of those is its position's top log-prob. The continuations are
    // llama.cpp's greedy tokens of ../shared/refs/stories260K_greedy.json, so
    // each log-prob must be llama.cpp's (within test_golden's 1e-2) and every
    // one greedy.
    test("lm-evaluation-harness's loglikelihood requests give llama.cpp's log-probs", async () => {
        const ref = JSON.parse(fs.readFileSync(path.join(SHARED, "refs/stories260K_greedy.json"), "utf8"));
        const n = 40;
        const prompts = ref.prompts.map((p) => [...p.prompt_tokens, ...p.generated_token_ids.slice(0, n)]);
        for (const maxTokens of [1, 0]) {
            const r = await request(server, "POST", "/v1/completions", { body: {
                model: MODEL_ID, prompt: prompts, temperature: 0, max_tokens: maxTokens, logprobs: 1, seed: 1234, echo: true } });
            assert.equal(r.status, 200, r.text);
            const choices = [...r.json.choices].sort((a, b) => a.index - b.index);
            assert.equal(choices.length, prompts.length);
            choices.forEach((c, k) => {
                const want = ref.prompts[k], ctxlen = want.prompt_tokens.length, lp = c.logprobs;
                assert.equal(lp.tokens.length, prompts[k].length + maxTokens);
                assert.equal(lp.token_logprobs[0], null);
                assert.equal(lp.top_logprobs[0], null);
                const end = maxTokens ? -maxTokens : undefined;
                const got = lp.token_logprobs.slice(ctxlen, end), tops = lp.top_logprobs.slice(ctxlen, end);
                assert.equal(got.length, n);
                let sum = 0, wantSum = 0;
                got.forEach((v, j) => {
                    const w = want.per_token[j].logprob;
                    assert.ok(Math.abs(v - w) < 1e-2, `prompt ${k} token ${j}: ${v} vs llama.cpp ${w}`);
                    assert.equal(v, Math.max(...Object.values(tops[j])), `prompt ${k} token ${j} greedy`);
                    sum += v;
                    wantSum += w;
                });
                assert.ok(Math.abs(sum - wantSum) < 5e-2, `${sum} vs ${wantSum}`);
                // each token's text starts at its text_offset in the echoed text
                for (let i = 1; i < lp.tokens.length; i++) {
                    assert.ok(lp.text_offset[i] >= lp.text_offset[i - 1]);
                    const piece = c.text.slice(lp.text_offset[i], i + 1 < lp.tokens.length ? lp.text_offset[i + 1] : undefined);
                    assert.ok(lp.tokens[i].endsWith(piece) && piece.length >= lp.tokens[i].length - 1, `${i}: '${piece}' '${lp.tokens[i]}'`);
                }
            });
        }
    });

    test("stop strings end the text before them", async () => {
        const base = await openai.completions.create({ model: MODEL_ID, prompt: "Once upon a time", max_tokens: 30, temperature: 0 });
        const text = base.choices[0].text;
        const stop = text.slice(12, 17);
        const r = await openai.completions.create({ model: MODEL_ID, prompt: "Once upon a time", max_tokens: 30, temperature: 0, stop: [stop, "zzzz"] });
        assert.equal(r.choices[0].text, text.slice(0, text.indexOf(stop)));
        assert.equal(r.choices[0].finish_reason, "stop");
        const s = await collectStream(await openai.completions.create({ model: MODEL_ID, prompt: "Once upon a time", max_tokens: 30, temperature: 0, stop, stream: true }), "completion");
        assert.equal(s.texts[0], r.choices[0].text);
        assert.equal(s.finish[0], "stop");
    });

    test("best_of returns the n samples with the highest log-prob", async () => {
        const r = await openai.completions.create({ model: MODEL_ID, prompt: "Once upon a time", max_tokens: 10, best_of: 4, n: 2, seed: 3 });
        assert.equal(r.choices.length, 2);
        assert.equal(r.usage.completion_tokens, 40);
    });

    test("beam search extension", async () => {
        const r = await request(server, "POST", "/v1/completions", { body: { prompt: "Once upon a time", max_tokens: 12, beam_width: 3, n: 2, length_penalty: 1, early_stopping: true } });
        assert.equal(r.status, 200, r.text);
        assert.equal(r.json.choices.length, 2);
        assert.ok(r.json.choices[0].text.length > 0);
    });
});

describe("chat", () => {
    test("a chat completion with the assistant's message", async () => {
        const r = await openai.chat.completions.create({ model: MODEL_ID, messages: chatMsgs, max_tokens: 24, temperature: 0 });
        assert.equal(r.object, "chat.completion");
        assert.match(r.id, /^chatcmpl-/);
        assert.equal(r.choices[0].message.role, "assistant");
        assert.ok(r.choices[0].message.content.length > 0);
        assert.ok(["stop", "length"].includes(r.choices[0].finish_reason));
        assert.equal(r.usage.total_tokens, r.usage.prompt_tokens + r.usage.completion_tokens);
        const parts = await openai.chat.completions.create({ model: MODEL_ID, max_tokens: 24, temperature: 0,
            messages: [{ role: "system", content: "You are a storyteller." }, { role: "user", content: [{ type: "text", text: "Tell me a story about a cat." }] }] });
        assert.ok(parts.usage.prompt_tokens > r.usage.prompt_tokens);
    });

    test("streaming: role first, then content deltas, finish and usage", async () => {
        const args = { model: MODEL_ID, messages: chatMsgs, max_tokens: 30, temperature: 0 };
        const whole = await openai.chat.completions.create(args);
        const stream = await openai.chat.completions.create({ ...args, stream: true, stream_options: { include_usage: true } });
        let first = null;
        const texts = [];
        let usage = null, finish = null;
        for await (const chunk of stream) {
            if (chunk.usage) usage = chunk.usage;
            for (const c of chunk.choices) {
                if (first === null) first = c.delta;
                texts.push(c.delta.content ?? "");
                if (c.finish_reason) finish = c.finish_reason;
            }
        }
        assert.equal(first.role, "assistant");
        assert.equal(texts.join(""), whole.choices[0].message.content);
        assert.equal(finish, whole.choices[0].finish_reason);
        assert.deepEqual(tokenCounts(usage), tokenCounts(whole.usage));
    });

    test("n > 1 samples, each reproducible with its seed", async () => {
        const args = { model: MODEL_ID, messages: chatMsgs, max_tokens: 20, temperature: 1, n: 3, seed: 42 };
        const a = await openai.chat.completions.create(args);
        const b = await openai.chat.completions.create(args);
        assert.equal(a.choices.length, 3);
        assert.deepEqual(a.choices.map((c) => c.message.content), b.choices.map((c) => c.message.content));
        assert.ok(new Set(a.choices.map((c) => c.message.content)).size > 1, "samples differ from each other");
        const s = await collectStream(await openai.chat.completions.create({ ...args, stream: true }));
        assert.deepEqual(s.texts, a.choices.map((c) => c.message.content));
        const other = await openai.chat.completions.create({ ...args, seed: 43 });
        assert.notDeepEqual(other.choices.map((c) => c.message.content), a.choices.map((c) => c.message.content));
    });

    test("logprobs and top_logprobs", async () => {
        const r = await openai.chat.completions.create({ model: MODEL_ID, messages: chatMsgs, max_tokens: 8, temperature: 0, logprobs: true, top_logprobs: 2 });
        const content = r.choices[0].logprobs.content;
        assert.equal(content.length, r.usage.completion_tokens);
        for (const e of content) {
            assert.equal(typeof e.token, "string");
            assert.ok(e.logprob <= 0);
            assert.ok(Array.isArray(e.bytes));
            assert.equal(e.top_logprobs.length, 2);
            assert.ok(e.top_logprobs[0].logprob >= e.top_logprobs[1].logprob);
        }
        assert.equal(content.map((e) => e.token).join(""), r.choices[0].message.content);
        const s = await collectStream(await openai.chat.completions.create({ model: MODEL_ID, messages: chatMsgs, max_tokens: 8, temperature: 0, logprobs: true, top_logprobs: 2, stream: true }));
        assert.deepEqual(s.logprobs[0].map((e) => e.token), content.map((e) => e.token));
    });

    test("stop strings in chat", async () => {
        const base = await openai.chat.completions.create({ model: MODEL_ID, messages: chatMsgs, max_tokens: 30, temperature: 0 });
        const text = base.choices[0].message.content;
        const stop = text.slice(6, 10);
        const r = await openai.chat.completions.create({ model: MODEL_ID, messages: chatMsgs, max_tokens: 30, temperature: 0, stop });
        assert.equal(r.choices[0].message.content, text.slice(0, text.indexOf(stop)));
        assert.equal(r.choices[0].finish_reason, "stop");
    });

    test("sampling extensions are accepted", async () => {
        const r = await request(server, "POST", "/v1/chat/completions", { body: { messages: chatMsgs, max_tokens: 10, top_k: 20, min_p: 0.05, typical_p: 0.9,
            repetition_penalty: 1.1, penalty_last_n: 32, no_repeat_ngram_size: 3, min_tokens: 5, ignore_eos: true, presence_penalty: 0.5,
            frequency_penalty: 0.5, logit_bias: { "13": -100 }, seed: 1, user: "u1" } });
        assert.equal(r.status, 200, r.text);
        assert.equal(r.json.usage.completion_tokens, 10);
    });

    test("ignore_eos and min_tokens hold off the end-of-generation token", async () => {
        const body = { prompt: "Once upon a time", max_tokens: 12, temperature: 0, logit_bias: { 2: 100 } }; // </s> first
        const ends = await request(server, "POST", "/v1/completions", { body });
        assert.equal(ends.json.usage.completion_tokens, 0);
        assert.equal(ends.json.choices[0].finish_reason, "stop");
        const ignored = await request(server, "POST", "/v1/completions", { body: { ...body, ignore_eos: true } });
        assert.equal(ignored.json.usage.completion_tokens, 12);
        assert.equal(ignored.json.choices[0].finish_reason, "length");
        const min = await request(server, "POST", "/v1/completions", { body: { ...body, min_tokens: 5 } });
        assert.equal(min.json.usage.completion_tokens, 5);
        assert.equal(min.json.choices[0].finish_reason, "stop");
    });

    test("json_schema output validates", async () => {
        const schema = { type: "object", properties: { name: { type: "string", maxLength: 20 }, age: { type: "integer" } },
            required: ["name", "age"], additionalProperties: false };
        for (const stream of [false, true]) {
            const args = { model: MODEL_ID, messages: chatMsgs, max_tokens: 60, temperature: 1, seed: 9,
                response_format: { type: "json_schema", json_schema: { name: "person", schema, strict: true } } };
            const content = stream ? (await collectStream(await openai.chat.completions.create({ ...args, stream: true }))).texts[0]
                : (await openai.chat.completions.create(args)).choices[0].message.content;
            const obj = JSON.parse(content);
            assert.equal(typeof obj.name, "string");
            assert.ok(obj.name.length <= 20);
            assert.ok(Number.isInteger(obj.age));
            assert.deepEqual(Object.keys(obj).sort(), ["age", "name"]);
        }
    });

    test("json_object, grammar, regex and choice constraints", async () => {
        const obj = await openai.chat.completions.create({ model: MODEL_ID, messages: chatMsgs, max_tokens: 40, seed: 3,
            response_format: { type: "json_object" } });
        const parsed = JSON.parse(obj.choices[0].message.content);
        assert.equal(typeof parsed, "object");
        assert.ok(parsed !== null && !Array.isArray(parsed));
        const post = (body) => request(server, "POST", "/v1/completions", { body: { prompt: "The color is", max_tokens: 12, seed: 4, ...body } });
        const choice = await post({ choice: ["red", "green", "blue"], n: 3 });
        assert.equal(choice.status, 200, choice.text);
        for (const c of choice.json.choices) assert.ok(["red", "green", "blue"].includes(c.text), c.text);
        const regex = await post({ regex: "[0-9]{3}-[a-z]+" });
        assert.match(regex.json.choices[0].text, /^[0-9]{3}-[a-z]+$/);
        const gbnf = await post({ grammar: 'root ::= ("yes" | "no") "!"' });
        assert.match(gbnf.json.choices[0].text, /^(yes|no)!$/);
        assert.equal(gbnf.json.choices[0].finish_reason, "stop");
        const bad = await post({ grammar: "root ::= (" });
        assert.equal(bad.status, 400);
        assert.equal(bad.json.error.param, "grammar");
        const badSchema = await request(server, "POST", "/v1/chat/completions", { body: { messages: chatMsgs,
            response_format: { type: "json_schema", json_schema: { name: "x", schema: { type: "wizard" } } } } });
        assert.equal(badSchema.status, 400);
        assert.equal(badSchema.json.error.param, "response_format");
        const both = await post({ regex: "a", choice: ["a"] });
        assert.equal(both.status, 400);
    });
});

describe("other endpoints", () => {
    test("models lists the loaded model", async () => {
        const list = await openai.models.list();
        assert.deepEqual(list.data.map((m) => m.id), [MODEL_ID]);
        const one = await openai.models.retrieve(MODEL_ID);
        assert.equal(one.id, MODEL_ID);
    });

    test("health", async () => {
        const r = await request(server, "GET", "/health");
        assert.equal(r.status, 200);
        assert.deepEqual(r.json, { status: "ok" });
    });

    test("tokenize and detokenize round-trip", async () => {
        const t = await request(server, "POST", "/tokenize", { body: { content: "Hello world", with_pieces: true } });
        assert.equal(t.status, 200);
        const ids = t.json.tokens.map((x) => x.id);
        assert.equal(t.json.tokens.map((x) => x.piece).join("").trim(), "Hello world");
        const d = await request(server, "POST", "/detokenize", { body: { tokens: ids } });
        assert.equal(d.status, 200);
        assert.equal(d.json.content, "Hello world");
    });

    test("metrics in the Prometheus text format", async () => {
        const r = await request(server, "GET", "/metrics");
        assert.equal(r.status, 200);
        assert.match(r.headers["content-type"], /text\/plain/);
        for (const name of ["nucleus_requests_total", "nucleus_generated_tokens_total", "nucleus_prompt_tokens_total",
            "nucleus_request_duration_seconds_bucket", "nucleus_time_to_first_token_seconds_count", "nucleus_queue_depth",
            "nucleus_batch_samples_bucket", "nucleus_slots_busy"])
            assert.match(r.text, new RegExp(`^${name}`, "m"), name);
        assert.match(r.text, /nucleus_requests_total\{endpoint="completions",status="200"\} [1-9]/);
    });
});
