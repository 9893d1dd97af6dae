// Anthropic's Messages API through the official client (@anthropic-ai/sdk):
// messages.create, messages.stream, tools (tool_use / tool_result), thinking
// blocks, count_tokens, stop_sequences, the error shape. Answers are checked
// against the chat-completions endpoint, which runs the same generation: a
// greedy answer is the same text, and a conversation's prompt the same
// number of tokens, whichever API asks.
import assert from "node:assert/strict";
import { createRequire } from "node:module";
import { after, before, describe, test } from "node:test";
import Anthropic from "@anthropic-ai/sdk";
import { MODEL_ID, assertCleanExit, client, request, startServer, template, thinkingModel } from "./helpers.mjs";

const require = createRequire(new URL("../js/package.json", import.meta.url));
const Ajv2020 = require("ajv/dist/2020").default;
const ajv = new Ajv2020({ allErrors: true, strict: false });

const anthropic = (server, apiKey = "sk-no-key") =>
    new Anthropic({ baseURL: `http://127.0.0.1:${server.port}`, apiKey, maxRetries: 0, timeout: 120000 });

const weather = {
    name: "get_weather",
    description: "Get the current weather for a city.",
    input_schema: {
        type: "object",
        properties: { city: { type: "string", maxLength: 12 }, unit: { type: "string", enum: ["celsius", "fahrenheit"] } },
        required: ["city", "unit"],
        additionalProperties: false,
    },
};
const validWeather = ajv.compile(weather.input_schema);

describe("Messages on stories260K", () => {
    let server, claude, openai;
    before(async () => {
        server = await startServer(["--api-key", "sk-test"]);
        claude = anthropic(server, "sk-test");
        openai = client(server, "sk-test");
    });
    after(async () => assertCleanExit(assert, await server.stop()));

    test("messages.create: a greedy answer is the chat completion's, with Anthropic's fields", async () => {
        const messages = [{ role: "user", content: "Once upon a time" }];
        const m = await claude.messages.create({ model: MODEL_ID, max_tokens: 12, temperature: 0, messages });
        const c = await openai.chat.completions.create({ model: MODEL_ID, max_tokens: 12, temperature: 0, messages });
        assert.equal(m.type, "message");
        assert.equal(m.role, "assistant");
        assert.match(m.id, /^msg_[A-Za-z0-9]{24}$/);
        assert.equal(m.model, MODEL_ID);
        assert.equal(m.content.length, 1);
        assert.equal(m.content[0].type, "text");
        assert.equal(m.content[0].text, c.choices[0].message.content);
        assert.equal(m.stop_reason, "max_tokens");
        assert.equal(m.stop_sequence, null);
        assert.equal(m.usage.output_tokens, 12);
        assert.equal(m.usage.input_tokens + m.usage.cache_read_input_tokens, c.usage.prompt_tokens);
    });

    test("system, several turns, top_p / top_k: the same prompt as chat completions; count_tokens agrees", async () => {
        const turns = [
            { role: "user", content: "Hi" },
            { role: "assistant", content: [{ type: "text", text: "Hello." }] },
            { role: "user", content: [{ type: "text", text: "Tell me" }, { type: "text", text: "a story" }] },
        ];
        const m = await claude.messages.create({ model: MODEL_ID, system: "Be kind.", max_tokens: 4, top_p: 0.9, top_k: 20, messages: turns });
        const c = await openai.chat.completions.create({
            model: MODEL_ID, max_tokens: 4, messages: [
                { role: "system", content: "Be kind." },
                { role: "user", content: "Hi" },
                { role: "assistant", content: "Hello." },
                { role: "user", content: "Tell me\n\na story" },
            ],
        });
        assert.equal(m.usage.input_tokens + m.usage.cache_read_input_tokens, c.usage.prompt_tokens);
        const n = await claude.messages.countTokens({ model: MODEL_ID, system: [{ type: "text", text: "Be kind." }], messages: turns });
        assert.equal(n.input_tokens, c.usage.prompt_tokens);
        // tools are part of the prompt: counted as chat completions counts them
        const tools = [{ name: "get_weather", description: "Weather.", input_schema: { type: "object", properties: { city: { type: "string" } } } }];
        const withTools = await claude.messages.countTokens({ model: MODEL_ID, messages: turns, tools });
        const ct = await openai.chat.completions.create({
            model: MODEL_ID, max_tokens: 1, messages: [
                { role: "user", content: "Hi" }, { role: "assistant", content: "Hello." }, { role: "user", content: "Tell me\n\na story" }],
            tools: [{ type: "function", function: { name: "get_weather", description: "Weather.", parameters: tools[0].input_schema } }],
        });
        assert.equal(withTools.input_tokens, ct.usage.prompt_tokens);
    });

    test("stop_sequences: the text ends before the one that matched, which is named", async () => {
        const messages = [{ role: "user", content: "Once upon a time" }];
        const full = await claude.messages.create({ model: MODEL_ID, max_tokens: 30, temperature: 0, messages });
        const text = full.content[0].text;
        const stop = text.slice(8, 12);
        const m = await claude.messages.create({ model: MODEL_ID, max_tokens: 30, temperature: 0, messages, stop_sequences: ["never appears", stop] });
        assert.equal(m.stop_reason, "stop_sequence");
        assert.equal(m.stop_sequence, stop);
        assert.equal(m.content[0].text, text.slice(0, text.indexOf(stop)));
    });

    test("an answer that ends by itself is end_turn", async () => {
        const m = await claude.messages.create({ model: MODEL_ID, max_tokens: 30, messages: [{ role: "user", content: "Hi" }], regex: "Hello there\\." });
        assert.equal(m.content[0].text, "Hello there.");
        assert.equal(m.stop_reason, "end_turn");
    });

    test("messages.stream: Anthropic's events, and the same message as create", async () => {
        const params = { model: MODEL_ID, max_tokens: 16, temperature: 0, messages: [{ role: "user", content: "Once upon a time" }] };
        const whole = await claude.messages.create(params);
        const stream = claude.messages.stream(params);
        const types = [];
        let text = "";
        stream.on("streamEvent", (e) => types.push(e.type));
        stream.on("text", (t) => { text += t; });
        const final = await stream.finalMessage();
        assert.equal(text, whole.content[0].text);
        assert.deepEqual(final.content, whole.content);
        assert.equal(final.stop_reason, "max_tokens");
        assert.equal(final.usage.output_tokens, 16);
        assert.equal(types[0], "message_start");
        assert.equal(types[1], "content_block_start");
        assert.deepEqual(types.slice(-3), ["content_block_stop", "message_delta", "message_stop"]);
        assert.ok(types.slice(2, -3).every((t) => t === "content_block_delta"));
        // the raw stream: each event named, as the SDK requires
        const raw = await request(server, "POST", "/v1/messages", { headers: { "x-api-key": "sk-test" }, body: { ...params, stream: true } });
        assert.equal(raw.status, 200);
        assert.match(raw.headers["content-type"], /^text\/event-stream/);
        const blocks = raw.text.trim().split("\n\n");
        for (const block of blocks) assert.match(block, /^event: [a-z_]+\ndata: \{/);
        const events = blocks.map((b) => JSON.parse(b.slice(b.indexOf("data: ") + 6)));
        for (const [i, b] of blocks.entries()) assert.equal(b.split("\n")[0], `event: ${events[i].type}`);
        assert.deepEqual(events.slice(0, 3).map((e) => e.type), ["message_start", "ping", "content_block_start"]);
        assert.deepEqual(events[0].message.content, []);
        assert.equal(events[0].message.stop_reason, null);
        assert.deepEqual(events[2].content_block, { type: "text", text: "" });
        const deltas = events.filter((e) => e.type === "content_block_delta");
        assert.ok(deltas.every((e) => e.index === 0 && e.delta.type === "text_delta"));
        assert.equal(deltas.map((e) => e.delta.text).join(""), whole.content[0].text);
        const end = events.find((e) => e.type === "message_delta");
        assert.deepEqual(end.delta, { stop_reason: "max_tokens", stop_sequence: null });
        assert.equal(end.usage.output_tokens, 16);
    });

    test("messages.stream with stop_sequences: message_delta names the one that matched", async () => {
        const messages = [{ role: "user", content: "Once upon a time" }];
        const full = await claude.messages.create({ model: MODEL_ID, max_tokens: 30, temperature: 0, messages });
        const text = full.content[0].text;
        const stop = text.slice(10, 13);
        const stream = claude.messages.stream({ model: MODEL_ID, max_tokens: 30, temperature: 0, messages, stop_sequences: [stop] });
        let delta;
        stream.on("streamEvent", (e) => { if (e.type === "message_delta") delta = e.delta; });
        const final = await stream.finalMessage();
        assert.deepEqual(delta, { stop_reason: "stop_sequence", stop_sequence: stop });
        assert.equal(final.stop_reason, "stop_sequence");
        assert.equal(final.stop_sequence, stop);
        assert.equal(final.content[0].text, text.slice(0, text.indexOf(stop)));
    });

    test("tools: a forced call is a tool_use block whose input follows the schema; its result goes back", async () => {
        const ask = [{ role: "user", content: "What is the weather in Paris?" }];
        const m = await claude.messages.create({ model: MODEL_ID, max_tokens: 80, messages: ask, tools: [weather], tool_choice: { type: "any" } });
        assert.equal(m.stop_reason, "tool_use");
        const uses = m.content.filter((b) => b.type === "tool_use");
        assert.equal(uses.length >= 1, true, JSON.stringify(m.content));
        for (const u of uses) {
            assert.equal(u.name, "get_weather");
            assert.match(u.id, /^toolu_/);
            assert.ok(validWeather(u.input), JSON.stringify(u.input));
        }
        // streamed: the input arrives as input_json_delta pieces
        const stream = claude.messages.stream({ model: MODEL_ID, max_tokens: 80, messages: ask, tools: [weather], tool_choice: { type: "tool", name: "get_weather" } });
        let json = "";
        stream.on("inputJson", (piece) => { json += piece; });
        const final = await stream.finalMessage();
        const use = final.content.find((b) => b.type === "tool_use");
        assert.deepEqual(JSON.parse(json), use.input);
        assert.ok(validWeather(use.input));
        // the call and its result go back; the model answers in text
        const next = await claude.messages.create({
            model: MODEL_ID, max_tokens: 8, tools: [weather],
            messages: [...ask, { role: "assistant", content: m.content },
                { role: "user", content: [{ type: "tool_result", tool_use_id: uses[0].id, content: "Sunny, 21 C" }] }],
        });
        assert.equal(next.type, "message");
        assert.ok(next.usage.input_tokens + next.usage.cache_read_input_tokens > m.usage.input_tokens);
        // a tool_result answering no call is refused
        await assert.rejects(claude.messages.create({
            model: MODEL_ID, max_tokens: 8, messages: [...ask, { role: "assistant", content: "ok" },
                { role: "user", content: [{ type: "tool_result", tool_use_id: "toolu_nope", content: "x" }] }],
        }), (e) => e.status === 400 && e.error?.type === "error" && e.error.error.type === "invalid_request_error");
    });

    test("errors have Anthropic's shape: bad fields, a wrong key, an unknown model", async () => {
        const bad = [
            [{ model: MODEL_ID, messages: [{ role: "user", content: "Hi" }] }, /max_tokens/],
            [{ model: MODEL_ID, max_tokens: 5, messages: [{ role: "user", content: "Hi" }], temperature: 1.5 }, /temperature/],
            [{ model: MODEL_ID, max_tokens: 5, messages: [{ role: "user", content: "Hi" }], top_p: 7 }, /top_p/],
            [{ model: MODEL_ID, max_tokens: 5, messages: [{ role: "user", content: "Hi" }], top_k: -2 }, /top_k/],
            [{ model: MODEL_ID, max_tokens: 5, messages: [{ role: "user", content: "Hi" }], frequency_penalty: 1 }, /frequency_penalty: Extra inputs/],
            [{ model: MODEL_ID, max_tokens: 5, messages: [{ role: "user", content: [{ type: "image", source: {} }] }] }, /image/],
            [{ model: MODEL_ID, max_tokens: 5, messages: [{ role: "user", content: "Hi" }, { role: "assistant", content: "Once" }] }, /prefill/],
            [{ model: MODEL_ID, max_tokens: 5, messages: [{ role: "user", content: "Hi" }], stop_sequences: [""] }, /stop_sequences/],
            [{ model: MODEL_ID, max_tokens: 5, messages: [{ role: "user", content: "Hi" }], thinking: { type: "enabled", budget_tokens: 2 } }, /does not think: .thinking.budget_tokens. does not apply/],
        ];
        const malformed = [
            ['{"model": "x", ', /JSON/i],
            ["[1, 2]", /object/],
            [JSON.stringify({ model: MODEL_ID, max_tokens: 5 }), /messages/],
            [JSON.stringify({ model: MODEL_ID, max_tokens: 5, messages: [{ role: "system", content: "Hi" }] }), /role/],
            [JSON.stringify({ model: MODEL_ID, max_tokens: 5, messages: [{ role: "user", content: 7 }] }), /content/],
            [JSON.stringify({ model: MODEL_ID, max_tokens: 5, messages: [{ role: "user", content: "Hi" }], tools: [{ name: "f" }] }), /input_schema/],
            [JSON.stringify({ model: MODEL_ID, max_tokens: 5, messages: [{ role: "user", content: "Hi" }], tool_choice: { type: "maybe" } }), /tool_choice/],
            [JSON.stringify({ model: MODEL_ID, max_tokens: 5.5, messages: [{ role: "user", content: "Hi" }] }), /max_tokens/],
            [JSON.stringify({ model: MODEL_ID, max_tokens: 5, messages: [{ role: "user", content: "Hi" }], stop_sequences: "x" }), /stop_sequences/],
        ];
        for (const [text, message] of malformed) {
            const r = await request(server, "POST", "/v1/messages", { headers: { "x-api-key": "sk-test" }, body: text });
            assert.equal(r.status, 400, r.text);
            assert.equal(r.json.type, "error");
            assert.equal(r.json.error.type, "invalid_request_error");
            assert.match(r.json.error.message, message);
        }
        for (const [body, message] of bad) {
            const r = await request(server, "POST", "/v1/messages", { headers: { "x-api-key": "sk-test" }, body });
            assert.equal(r.status, 400, r.text);
            assert.equal(r.json.type, "error");
            assert.equal(r.json.error.type, "invalid_request_error");
            assert.match(r.json.error.message, message);
        }
        await assert.rejects(anthropic(server, "sk-wrong").messages.create({ model: MODEL_ID, max_tokens: 5, messages: [{ role: "user", content: "Hi" }] }),
            (e) => e.status === 401 && e.error.error.type === "authentication_error");
        await assert.rejects(claude.messages.create({ model: "no-such-model", max_tokens: 5, messages: [{ role: "user", content: "Hi" }] }),
            (e) => e.status === 404 && e.error.error.type === "not_found_error");
        // a prompt longer than the context: 400 with Anthropic's shape (its 413 is for huge bodies)
        const long = await request(server, "POST", "/v1/messages", { headers: { "x-api-key": "sk-test" },
            body: { model: MODEL_ID, max_tokens: 5, messages: [{ role: "user", content: "Once upon a time ".repeat(1500) }] } });
        assert.equal(long.status, 400, long.text);
        assert.equal(long.json.error.type, "invalid_request_error");
        assert.match(long.json.error.message, /the prompt has \d+ tokens/);
        const r = await request(server, "POST", "/v1/messages/count_tokens", { headers: { "x-api-key": "sk-test" }, body: { model: MODEL_ID, max_tokens: 3, messages: [{ role: "user", content: "Hi" }] } });
        assert.equal(r.status, 400);
        assert.match(r.json.error.message, /max_tokens: Extra inputs/);
    });
});

describe("Messages with thinking (a Qwen3 and its template)", () => {
    let server, claude;
    before(async () => {
        server = await startServer(["--chat-template", template("qwen3_0_6b"), "-c", "1024", "--parallel", "2"], { model: thinkingModel() });
        claude = anthropic(server);
    });
    after(async () => assertCleanExit(assert, await server.stop()));

    const ask = [{ role: "user", content: "Weather in Paris?" }];
    const regex = "<think>\nThe user asks\\.\n</think>\n\nSunny\\.";

    test("thinking comes as a thinking block before the text, whole and streamed", async () => {
        const m = await claude.messages.create({ model: "server-qwen3-tiny-qwen2vocab-seed3.gguf", max_tokens: 80, messages: ask, regex });
        assert.deepEqual(m.content.map((b) => b.type), ["thinking", "text"]);
        assert.equal(m.content[0].thinking, "The user asks.");
        assert.equal(m.content[1].text, "Sunny.");
        const stream = claude.messages.stream({ model: "server-qwen3-tiny-qwen2vocab-seed3.gguf", max_tokens: 80, messages: ask, regex });
        let thinking = "";
        stream.on("thinking", (t) => { thinking += t; });
        const final = await stream.finalMessage();
        assert.equal(thinking, "The user asks.");
        assert.deepEqual(final.content.map((b) => [b.type, b.thinking ?? b.text]), m.content.map((b) => [b.type, b.thinking ?? b.text]));
        // the thinking given back is accepted (and kept out of the prompt by the template)
        const next = await claude.messages.create({ model: "server-qwen3-tiny-qwen2vocab-seed3.gguf", max_tokens: 2, messages: [...ask, { role: "assistant", content: m.content }, { role: "user", content: "And Rome?" }] });
        const plain = await claude.messages.create({ model: "server-qwen3-tiny-qwen2vocab-seed3.gguf", max_tokens: 2, messages: [...ask, { role: "assistant", content: "Sunny." }, { role: "user", content: "And Rome?" }] });
        assert.equal(next.usage.input_tokens + next.usage.cache_read_input_tokens, plain.usage.input_tokens + plain.usage.cache_read_input_tokens);
    });

    test("thinking disabled turns the template's switch off", async () => {
        const on = await claude.messages.countTokens({ model: "server-qwen3-tiny-qwen2vocab-seed3.gguf", messages: ask });
        const off = await claude.messages.countTokens({ model: "server-qwen3-tiny-qwen2vocab-seed3.gguf", messages: ask, thinking: { type: "disabled" } });
        const block = await request(server, "POST", "/tokenize", { body: { content: "<think>\n\n</think>\n\n" } });
        assert.equal(off.input_tokens, on.input_tokens + block.json.tokens.length);
    });
});

describe("Messages with a thinking budget (DeepSeek-R1's template)", () => {
    let server, claude;
    before(async () => {
        server = await startServer(["--chat-template", template("deepseek_r1_distill_qwen_32b"), "-c", "1024"], { model: thinkingModel() });
        claude = anthropic(server);
    });
    after(async () => assertCleanExit(assert, await server.stop()));

    test("budget_tokens: the thinking is closed after that many tokens, then the text follows", async () => {
        const m = await claude.messages.create({
            model: "server-qwen3-tiny-qwen2vocab-seed3.gguf", max_tokens: 16, temperature: 0,
            thinking: { type: "enabled", budget_tokens: 4 }, messages: [{ role: "user", content: "Hi" }],
        });
        assert.deepEqual(m.content.map((b) => b.type), ["thinking", "text"]);
        assert.equal(m.usage.output_tokens, 16);
        const close = await request(server, "POST", "/tokenize", { body: { content: "\n</think>\n\n" } });
        // 4 thinking tokens, the forced close, and the rest is text
        const chat = await client(server).chat.completions.create({ max_tokens: 16, temperature: 0, max_thinking_tokens: 4, logprobs: true, messages: [{ role: "user", content: "Hi" }] });
        const toks = chat.choices[0].logprobs.content.map((t) => t.token);
        assert.equal(m.content[0].thinking, toks.slice(0, 4).join("").trim());
        assert.equal(m.content[1].text, toks.slice(4 + close.json.tokens.length).join("").trimStart());
    });
});
