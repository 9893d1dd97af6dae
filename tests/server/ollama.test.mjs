// Ollama's API through the official `ollama` client: list, chat (streamed
// and not), generate (raw and through the chat template), embed, show, ps,
// version; a reasoning model's thinking as message.thinking, and think on
// the template's switch; Ollama's option names mean what the OpenAI fields they stand
// for mean (the same greedy text from both APIs, with Ollama's default
// repeat_penalty 1.1 over the last 64 tokens); NDJSON when stream is not
// given; loading and unloading with an empty conversation; errors in
// Ollama's shape, with unknown fields and options refused by name.
import assert from "node:assert/strict";
import fs from "node:fs";
import { after, before, describe, test } from "node:test";
import { Ollama } from "ollama";
import { MODEL, MODEL_ID, assertCleanExit, client, request, startServer, template, thinkingModel } from "./helpers.mjs";

const messages = [{ role: "user", content: "Tell me a story about a cat." }];
// What an Ollama request without those options samples with, as OpenAI fields.
const OLLAMA_DEFAULTS = { repetition_penalty: 1.1, penalty_last_n: 64, top_k: 40, top_p: 0.9 };

describe("ollama", () => {
    let server, ollama, openai;
    before(async () => {
        server = await startServer(["--parallel", "2", "--ctx", "512"]);
        ollama = new Ollama({ host: `http://127.0.0.1:${server.port}` });
        openai = client(server);
    });
    after(async () => assertCleanExit(assert, await server.stop()));

    test("list: the served model with Ollama's details", async () => {
        const r = await ollama.list();
        assert.equal(r.models.length, 1);
        const m = r.models[0];
        assert.equal(m.name, MODEL_ID);
        assert.equal(m.model, MODEL_ID);
        assert.equal(m.size, fs.statSync(MODEL).size);
        assert.match(m.digest, /^[0-9a-f]{64}$/);
        assert.ok(!Number.isNaN(Date.parse(m.modified_at)));
        assert.equal(m.details.format, "gguf");
        assert.equal(m.details.family, "llama");
        assert.equal(m.details.quantization_level, "F32");
        assert.equal(m.details.parameter_size, "292.8K");
    });

    test("chat, not streamed: the OpenAI endpoint's greedy text, with Ollama's statistics", async () => {
        const r = await ollama.chat({ model: MODEL_ID, messages, options: { temperature: 0, num_predict: 24 } });
        const o = await openai.chat.completions.create({ model: MODEL_ID, messages, max_tokens: 24, temperature: 0, ...OLLAMA_DEFAULTS });
        assert.equal(r.model, MODEL_ID);
        assert.equal(r.message.role, "assistant");
        assert.equal(r.message.content, o.choices[0].message.content);
        assert.equal(r.done, true);
        assert.equal(r.done_reason, "length");
        assert.equal(r.eval_count, 24);
        assert.equal(r.prompt_eval_count, o.usage.prompt_tokens);
        assert.ok(r.total_duration >= r.eval_duration && r.eval_duration > 0, JSON.stringify(r));
        assert.ok(!Number.isNaN(Date.parse(r.created_at)));
        // the options are what they say: without the defaults the text differs
        const plain = await openai.chat.completions.create({ model: MODEL_ID, messages, max_tokens: 24, temperature: 0 });
        const same = await ollama.chat({ model: MODEL_ID, messages, options: { temperature: 0, num_predict: 24, repeat_penalty: 1, top_k: 0, top_p: 1 } });
        assert.equal(same.message.content, plain.choices[0].message.content);
    });

    test("chat, streamed: the pieces make the same text and the last says done", async () => {
        const whole = await ollama.chat({ model: MODEL_ID, messages, options: { temperature: 0, num_predict: 30 } });
        let text = "", last = null, parts = 0;
        for await (const part of await ollama.chat({ model: MODEL_ID, messages, stream: true, options: { temperature: 0, num_predict: 30 } })) {
            parts++;
            text += part.message.content;
            last = part;
            if (!part.done) assert.equal(part.message.role, "assistant");
        }
        assert.ok(parts >= 2, `${parts} parts`);
        assert.equal(text, whole.message.content);
        assert.equal(last.done, true);
        assert.equal(last.done_reason, "length");
        assert.equal(last.eval_count, 30);
    });

    test("generate: raw continues the prompt (llama.cpp's greedy text), templated is a chat turn", async () => {
        const raw = await ollama.generate({ model: MODEL_ID, prompt: "Once upon a time", raw: true, options: { temperature: 0, num_predict: 20, repeat_penalty: 1 } });
        assert.ok(raw.response.startsWith(", there was"), raw.response);
        assert.equal(raw.eval_count, 20);
        assert.equal(raw.prompt_eval_count, 5);
        const chat = await ollama.generate({ model: MODEL_ID, prompt: "Tell me a story about a cat.", system: "Be brief.", options: { temperature: 0, num_predict: 16 } });
        const o = await openai.chat.completions.create({ model: MODEL_ID, max_tokens: 16, temperature: 0, ...OLLAMA_DEFAULTS,
            messages: [{ role: "system", content: "Be brief." }, ...messages] });
        assert.equal(chat.response, o.choices[0].message.content);
        let text = "", done = null;
        for await (const part of await ollama.generate({ model: MODEL_ID, prompt: "Once upon a time", raw: true, stream: true, options: { temperature: 0, num_predict: 20, repeat_penalty: 1 } })) {
            text += part.response;
            if (part.done) done = part;
        }
        assert.equal(text, raw.response);
        assert.equal(done.done_reason, "length");
    });

    test("without stream, the answer is NDJSON, one object per line", async () => {
        const r = await request(server, "POST", "/api/generate", { body: { model: MODEL_ID, prompt: "Once upon a time", raw: true, options: { num_predict: 8 } } });
        assert.equal(r.status, 200, r.text);
        assert.match(r.headers["content-type"], /application\/x-ndjson/);
        const lines = r.text.trim().split("\n").map((l) => JSON.parse(l));
        assert.ok(lines.length >= 2);
        assert.ok(lines.slice(0, -1).every((l) => l.done === false && typeof l.response === "string"));
        assert.equal(lines.at(-1).done, true);
        assert.equal(lines.at(-1).eval_count, 8);
    });

    test("options: stop, seed, num_ctx, format", async () => {
        const stop = await ollama.generate({ model: MODEL_ID, prompt: "Once upon a time", raw: true, options: { temperature: 0, num_predict: 60, stop: ["."] } });
        assert.ok(!stop.response.includes("."), stop.response);
        assert.equal(stop.done_reason, "stop");
        const sample = (seed) => ollama.generate({ model: MODEL_ID, prompt: "Once upon a time", raw: true, options: { seed, temperature: 1, num_predict: 30 } });
        const [a, b, c] = await Promise.all([sample(7), sample(7), sample(8)]);
        assert.equal(a.response, b.response);
        assert.notEqual(a.response, c.response);
        // mirostat is llama.cpp's (the OpenAI endpoint's field of that name)
        const miro = { temperature: 1, num_predict: 20, seed: 5, mirostat: 2, mirostat_tau: 3, mirostat_eta: 0.2 };
        const m1 = await ollama.generate({ model: MODEL_ID, prompt: "Once upon a time", raw: true, options: miro });
        const m2 = await openai.completions.create({ model: MODEL_ID, prompt: "Once upon a time", max_tokens: 20, seed: 5, temperature: 1,
            mirostat: 2, mirostat_tau: 3, mirostat_eta: 0.2, ...OLLAMA_DEFAULTS });
        assert.equal(m1.response, m2.choices[0].text);
        await assert.rejects(ollama.generate({ model: MODEL_ID, prompt: "Once upon a time ".repeat(10), raw: true, options: { num_ctx: 16 } }),
            (e) => e.status_code === 413 && /request's context takes at most 15/.test(e.message));
        await assert.rejects(ollama.chat({ model: MODEL_ID, messages, options: { num_ctx: 100000 } }),
            (e) => e.status_code === 400 && /num_ctx 100000 is more than the 512 tokens/.test(e.message));
        const json = await ollama.chat({ model: MODEL_ID, messages, format: "json", options: { num_predict: 40, seed: 3 } });
        const obj = JSON.parse(json.message.content);
        assert.ok(obj !== null && typeof obj === "object" && !Array.isArray(obj), json.message.content);
        const schema = { type: "object", properties: { age: { type: "integer" } }, required: ["age"] };
        const typed = await ollama.chat({ model: MODEL_ID, messages, format: schema, options: { num_predict: 40, seed: 3 } });
        assert.ok(Number.isInteger(JSON.parse(typed.message.content).age), typed.message.content);
    });

    test("a conversation with a tool call and its result is taken", async () => {
        const tools = [{ type: "function", function: { name: "get_weather", description: "The weather in a city",
            parameters: { type: "object", properties: { city: { type: "string" } }, required: ["city"] } } }];
        const r = await ollama.chat({ model: MODEL_ID, tools, options: { num_predict: 4 }, messages: [
            ...messages,
            { role: "assistant", content: "", tool_calls: [{ function: { name: "get_weather", arguments: { city: "Paris" } } }] },
            { role: "tool", content: "sunny", tool_name: "get_weather" },
        ] });
        assert.equal(r.done, true);
        await assert.rejects(ollama.chat({ model: MODEL_ID, messages: [...messages, { role: "tool", content: "sunny", tool_name: "get_weather" }] }),
            (e) => e.status_code === 400 && /no earlier assistant message called the tool get_weather/.test(e.message));
    });

    test("embed: unit vectors, the same as /v1/embeddings'; the older /api/embeddings is not normalised", async () => {
        const r = await ollama.embed({ model: MODEL_ID, input: ["Once upon a time", "The cat sat."] });
        assert.equal(r.model, MODEL_ID);
        assert.equal(r.embeddings.length, 2);
        const v1 = await request(server, "POST", "/v1/embeddings", { body: { model: MODEL_ID, input: ["Once upon a time", "The cat sat."], encoding_format: "float" } });
        assert.deepEqual(r.embeddings, v1.json.data.map((d) => d.embedding));
        assert.equal(r.prompt_eval_count, v1.json.usage.prompt_tokens);
        const one = await ollama.embeddings({ model: MODEL_ID, prompt: "The cat sat." });
        const raw = await request(server, "POST", "/v1/embeddings", { body: { model: MODEL_ID, input: "The cat sat.", normalize: false, encoding_format: "float" } });
        assert.deepEqual(one.embedding, raw.json.data[0].embedding);
        await assert.rejects(ollama.embed({ model: MODEL_ID, input: "Once upon a time ".repeat(200) }),
            (e) => e.status_code === 413 && /at most 512/.test(e.message));
        const cut = await ollama.embed({ model: MODEL_ID, input: "Once upon a time ".repeat(200), truncate: true });
        assert.equal(cut.prompt_eval_count, 512);
    });

    test("show, ps and version", async () => {
        const s = await ollama.show({ model: MODEL_ID });
        assert.equal(s.details.family, "llama");
        assert.equal(s.model_info["general.architecture"], "llama");
        assert.equal(s.model_info["llama.embedding_length"], 64);
        assert.deepEqual(s.model_info["tokenizer.ggml.tokens"], [], "lists are left out unless verbose");
        const v = await ollama.show({ model: MODEL_ID, verbose: true });
        assert.equal(v.model_info["tokenizer.ggml.tokens"].length, 512);
        assert.ok(s.capabilities.includes("completion"));
        const ps = await ollama.ps();
        assert.deepEqual(ps.models.map((m) => m.name), [MODEL_ID]);
        assert.ok(ps.models[0].size > fs.statSync(MODEL).size, "weights, KV cache and scratch");
        assert.equal(ps.models[0].context_length, 512);
        assert.match((await ollama.version()).version, /^\d+\.\d+\.\d+$/);
    });

    test("an empty conversation loads the model; with keep_alive 0 it unloads it", async () => {
        const load = await ollama.chat({ model: MODEL_ID, messages: [] });
        assert.equal(load.done_reason, "load");
        const unload = await ollama.generate({ model: MODEL_ID, prompt: "", keep_alive: 0 });
        assert.equal(unload.done_reason, "unload");
        assert.deepEqual((await ollama.ps()).models, []);
        assert.deepEqual((await ollama.list()).models.map((m) => m.name), [MODEL_ID], "still listed");
        const back = await ollama.generate({ model: MODEL_ID, prompt: "Once upon a time", raw: true, options: { temperature: 0, num_predict: 5, repeat_penalty: 1 } });
        assert.ok(back.response.startsWith(", there was"), "loaded again on use");
    });

    test("errors: Ollama's shape, the field or option named", async () => {
        const cases = [
            [{ model: "llama3:8b", messages }, 404, /'llama3:8b' does not exist/],
            [{ model: MODEL_ID, messages, options: { foo: 1 } }, 400, /unknown option 'foo'/],
            [{ model: MODEL_ID, messages, options: { temperature: "hot" } }, 400, /options\.temperature must be a number/],
            [{ model: MODEL_ID, messages, options: { num_predict: 0 } }, 400, /num_predict must be -1/],
            [{ model: MODEL_ID, messages, options: { stop: [""] } }, 400, /options\.stop: 'stop' strings must not be empty/],
            [{ model: MODEL_ID, messages, options: { mirostat: 3 } }, 400, /options\.mirostat must be an integer in 0\.\.2/],
            [{ model: MODEL_ID, messages, options: { mirostat: 2, mirostat_eta: 2 } }, 400, /options\.mirostat_eta must be a number in 0\.\.1/],
            [{ model: MODEL_ID, messages, keep_alive: "soon" }, 400, /keep_alive must be/],
            [{ model: MODEL_ID, messages, think: true }, 400, /think: this model's chat template does not think/],
            [{ model: MODEL_ID, messages, think: "hard" }, 400, /'think' must be true, false/],
            [{ model: MODEL_ID, messages, format: "xml" }, 400, /'format' must be "json" or a JSON schema/],
            [{ model: MODEL_ID, messages, seed: 1 }, 400, /unknown field 'seed'/],
            [{ model: MODEL_ID, messages: [{ role: "user", content: "hi", images: ["aGk="] }] }, 400, /images are not supported/],
        ];
        for (const [body, status, re] of cases) {
            const r = await request(server, "POST", "/api/chat", { body: { stream: false, ...body } });
            assert.equal(r.status, status, `${JSON.stringify(body).slice(0, 100)}: ${r.text}`);
            assert.equal(typeof r.json.error, "string", r.text);
            assert.match(r.json.error, re);
        }
        for (const [extra, re] of [[{ suffix: "end" }, /suffix/], [{ template: "{{ .Prompt }}" }, /Go template/],
            [{ context: [1, 2] }, /context/], [{ raw: true, system: "x" }, /raw prompt/]]) {
            const r = await request(server, "POST", "/api/generate", { body: { model: MODEL_ID, prompt: "hi", stream: false, ...extra } });
            assert.equal(r.status, 400, r.text);
            assert.match(r.json.error, re);
        }
        await assert.rejects(ollama.chat({ model: "nope", messages }), (e) => e.status_code === 404 && /'nope' does not exist/.test(e.message));
        const url = await request(server, "GET", "/api/nothing");
        assert.equal(url.status, 404);
        assert.equal(typeof url.json.error, "string");
    });
});

// A reasoning model: the tiny Qwen3 with DeepSeek-R1's template, whose prompt
// opens the thinking block, so a greedy answer that never closes it is all
// thinking (the split itself is reasoning.test.mjs's).
describe("ollama: thinking", () => {
    let server, ollama, openai;
    const ask = [{ role: "user", content: "What is the weather in Paris?" }];
    before(async () => {
        server = await startServer(["--chat-template", template("deepseek_r1_distill_qwen_32b"), "-c", "1024"],
            { model: thinkingModel() });
        ollama = new Ollama({ host: `http://127.0.0.1:${server.port}` });
        openai = client(server);
    });
    after(async () => assertCleanExit(assert, await server.stop()));

    test("the thinking is message.thinking, whole and streamed, as reasoning_content", async () => {
        const options = { temperature: 0, num_predict: 12 };
        const r = await ollama.chat({ messages: ask, options });
        const o = await openai.chat.completions.create({ messages: ask, max_tokens: 12, temperature: 0, ...OLLAMA_DEFAULTS });
        assert.ok(r.message.thinking.length > 0);
        assert.equal(r.message.thinking, o.choices[0].message.reasoning_content);
        assert.equal(r.message.content, o.choices[0].message.content);
        let thinking = "", content = "";
        for await (const part of await ollama.chat({ messages: ask, options, stream: true })) {
            thinking += part.message.thinking ?? "";
            content += part.message.content;
        }
        assert.equal(thinking, r.message.thinking);
        assert.equal(content, r.message.content);
        const g = await ollama.generate({ prompt: ask[0].content, options });
        assert.equal(g.thinking, r.message.thinking);
    });

    test("think: false closes the block in the prompt, as reasoning_effort none", async () => {
        const r = await ollama.chat({ messages: ask, think: false, options: { temperature: 0, num_predict: 5 } });
        const o = await openai.chat.completions.create({ messages: ask, max_tokens: 5, temperature: 0, reasoning_effort: "none", ...OLLAMA_DEFAULTS });
        assert.equal(r.message.thinking, undefined);
        assert.equal(r.message.content, o.choices[0].message.content);
        assert.equal(r.prompt_eval_count, o.usage.prompt_tokens);
        const on = await ollama.chat({ messages: ask, think: true, options: { num_predict: 1 } });
        assert.ok(on.prompt_eval_count < r.prompt_eval_count, "the closed block is in the prompt only with think: false");
    });
});
