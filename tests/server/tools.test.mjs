// Function calling through the official client: tools, tool_choice
// ("none", "auto", "required", a named function), parallel_tool_calls,
// assistant tool_calls and tool messages sent back, streamed tool_calls
// deltas. The model (stories260K) knows nothing of tools: a forced call is
// well formed only because the grammar built from the schemas makes it so,
// which is what is checked, with ajv (a validator nucleus did not write).
// Each chat template family writes calls its own way: Hermes / Qwen blocks,
// Mistral arrays, Llama 3 objects, and the generic JSON answer of a
// template without tools (the built-in chatml).
import assert from "node:assert/strict";
import { createRequire } from "node:module";
import path from "node:path";
import { after, before, describe, test } from "node:test";
import OpenAI from "openai";
import { MODEL_ID, SHARED, assertCleanExit, client, request, startServer } from "./helpers.mjs";

const require = createRequire(new URL("../js/package.json", import.meta.url));
const Ajv2020 = require("ajv/dist/2020").default;
const ajv = new Ajv2020({ allErrors: true, strict: false });

const tools = [
    {
        type: "function",
        function: {
            name: "get_weather",
            description: "Get the current weather for a city.",
            parameters: {
                type: "object",
                properties: {
                    city: { type: "string", description: "City name", maxLength: 12 },
                    unit: { type: "string", enum: ["celsius", "fahrenheit"] },
                    days: { type: "integer", minimum: 1, maximum: 7 },
                },
                required: ["city", "unit"],
                additionalProperties: false,
            },
        },
    },
    {
        type: "function",
        function: {
            name: "book_table",
            description: "Book a table.",
            parameters: {
                type: "object",
                properties: {
                    guests: { type: "integer", minimum: 1, maximum: 12 },
                    when: { type: "object", properties: { day: { type: "string", enum: ["mon", "tue"] }, hour: { type: "integer", minimum: 0, maximum: 23 } }, required: ["day", "hour"] },
                    notes: { type: "array", items: { type: "string", maxLength: 8 }, maxItems: 2 },
                },
                required: ["guests", "when"],
            },
        },
    },
];
const validators = Object.fromEntries(tools.map((t) => [t.function.name, ajv.compile(t.function.parameters)]));
const ask = [{ role: "user", content: "What is the weather in Paris? Then book a table." }];

// Each call is well formed: an id, a known function, arguments that parse and validate.
function assertCalls(calls, { idPattern = /^call_[A-Za-z0-9]{24}$/, only } = {}) {
    assert.ok(Array.isArray(calls) && calls.length >= 1, JSON.stringify(calls));
    for (const c of calls) {
        assert.equal(c.type, "function");
        assert.match(c.id, idPattern);
        assert.ok(validators[c.function.name], `unknown function ${c.function.name}`);
        if (only) assert.equal(c.function.name, only);
        assert.equal(typeof c.function.arguments, "string");
        const args = JSON.parse(c.function.arguments);
        const check = validators[c.function.name];
        assert.ok(check(args), `${c.function.arguments}: ${ajv.errorsText(check.errors)}`);
    }
    assert.equal(new Set(calls.map((c) => c.id)).size, calls.length, "ids are unique");
}

// The tool calls of a stream, put together from their deltas by index.
async function collectToolStream(stream) {
    const calls = [];
    let content = "", finish = null, chunks = 0, roleChunks = 0;
    for await (const chunk of stream) {
        chunks++;
        for (const c of chunk.choices) {
            if (c.delta.role) roleChunks++;
            if (c.delta.content) content += c.delta.content;
            for (const d of c.delta.tool_calls ?? []) {
                if (!calls[d.index]) {
                    // the first delta of a call has its id, type and name
                    assert.ok(d.id && d.type === "function" && d.function?.name, JSON.stringify(d));
                    calls[d.index] = { id: d.id, type: d.type, function: { name: d.function.name, arguments: "" } };
                } else {
                    assert.equal(d.id, undefined, "only the first delta carries the id");
                }
                calls[d.index].function.arguments += d.function?.arguments ?? "";
            }
            if (c.finish_reason) finish = c.finish_reason;
        }
    }
    assert.equal(roleChunks, 1);
    return { calls, content, finish, chunks };
}

const withoutIds = (calls) => calls.map((c) => ({ name: c.function.name, arguments: c.function.arguments }));

// The template families, each with its own server.
const families = [
    { name: "hermes (Qwen 2.5 template)", template: "qwen2_5_instruct.jinja", idPattern: /^call_[A-Za-z0-9]{24}$/ },
    { name: "mistral (v0.3 template)", template: "mistral_instruct_v0_3.jinja", idPattern: /^[A-Za-z0-9]{9}$/ },
    { name: "llama3 (3.1 template)", template: "llama3_1_instruct.jinja", idPattern: /^call_[A-Za-z0-9]{24}$/, single: true },
    { name: "generic (built-in chatml, no tools in the template)", template: "chatml", idPattern: /^call_[A-Za-z0-9]{24}$/ },
];

for (const fam of families) {
    describe(`tool calls: ${fam.name}`, () => {
        let server, openai;
        before(async () => {
            const tpl = fam.template.endsWith(".jinja") ? path.join(SHARED, "chat_templates", fam.template) : fam.template;
            // the Llama 3.1 template lays out the tools as indented JSON: a long prompt
            server = await startServer(["--parallel", "2", "--ctx", "4096", "--chat-template", tpl]);
            openai = client(server);
        });
        after(async () => assertCleanExit(assert, await server.stop()));

        const base = { model: MODEL_ID, messages: ask, tools, max_tokens: 200 };

        test("tool_choice required: every call parses and validates against its schema", async () => {
            for (const seed of [1, 2, 3, 4]) {
                const r = await openai.chat.completions.create({ ...base, tool_choice: "required", seed, temperature: 1 });
                const c = r.choices[0];
                assert.equal(c.finish_reason, "tool_calls", JSON.stringify(c));
                assert.equal(c.message.role, "assistant");
                assert.equal(c.message.content, null);
                assertCalls(c.message.tool_calls, { idPattern: fam.idPattern });
                if (fam.single) assert.equal(c.message.tool_calls.length, 1);
            }
        });

        test("a named function, one call: exactly that function; finish_reason stop as OpenAI's", async () => {
            for (const seed of [11, 12, 13]) {
                const args = {
                    ...base, seed, parallel_tool_calls: false,
                    tool_choice: { type: "function", function: { name: "book_table" } },
                };
                const r = await openai.chat.completions.create(args);
                const c = r.choices[0];
                assert.equal(c.message.tool_calls.length, 1);
                assertCalls(c.message.tool_calls, { idPattern: fam.idPattern, only: "book_table" });
                assert.equal(c.finish_reason, "stop");
                const s = await collectToolStream(await openai.chat.completions.create({ ...args, stream: true }));
                assert.equal(s.finish, "stop");
                assert.deepEqual(withoutIds(s.calls), withoutIds(c.message.tool_calls));
            }
        });

        test("streamed tool_calls put together equal the whole answer for the same seed", async () => {
            for (const seed of [21, 22]) {
                const args = { ...base, tool_choice: "required", seed, temperature: 1 };
                const whole = await openai.chat.completions.create(args);
                const s = await collectToolStream(await openai.chat.completions.create({ ...args, stream: true }));
                assert.equal(s.finish, "tool_calls");
                assert.equal(s.content, "", "no marker text streams as content");
                assertCalls(s.calls, { idPattern: fam.idPattern });
                assert.deepEqual(withoutIds(s.calls), withoutIds(whole.choices[0].message.tool_calls));
                assert.ok(s.chunks > s.calls.length + 2, "the arguments come in pieces");
                // the client's own stream helper assembles the same message
                const runner = openai.chat.completions.stream({ ...args });
                const final = await runner.finalChatCompletion();
                assert.deepEqual(withoutIds(final.choices[0].message.tool_calls), withoutIds(s.calls));
            }
        });

        test("auto: text or calls, the same streamed or not; calls are well formed", async () => {
            for (const seed of [31, 32, 33]) {
                const args = { ...base, seed, temperature: 1, max_tokens: 80 };
                const whole = (await openai.chat.completions.create(args)).choices[0];
                const s = await collectToolStream(await openai.chat.completions.create({ ...args, stream: true }));
                assert.equal(s.content, whole.message.content ?? "");
                assert.equal(s.finish, whole.finish_reason);
                if (whole.message.tool_calls) {
                    assertCalls(whole.message.tool_calls, { idPattern: fam.idPattern });
                    assert.deepEqual(withoutIds(s.calls), withoutIds(whole.message.tool_calls));
                } else {
                    assert.equal(s.calls.length, 0);
                    assert.equal(typeof whole.message.content, "string");
                }
            }
        });

        test("a call and its result go back in the next request", async () => {
            const first = await openai.chat.completions.create({ ...base, tool_choice: "required", seed: 41, parallel_tool_calls: false });
            const msg = first.choices[0].message;
            assertCalls(msg.tool_calls, { idPattern: fam.idPattern });
            const messages = [...ask, msg, ...msg.tool_calls.map((c) => ({ role: "tool", tool_call_id: c.id, content: "18 degrees" }))];
            const next = await openai.chat.completions.create({ ...base, messages, seed: 42, max_tokens: 16 });
            assert.ok(["stop", "length", "tool_calls"].includes(next.choices[0].finish_reason));
            assert.ok(next.usage.prompt_tokens > first.usage.prompt_tokens, "the call and its result are in the prompt");
        });

        test("tool_choice none: text only, tools still in the prompt", async () => {
            const none = await openai.chat.completions.create({ ...base, tool_choice: "none", seed: 5, max_tokens: 12 });
            assert.equal(none.choices[0].message.tool_calls, undefined);
            assert.equal(typeof none.choices[0].message.content, "string");
            assert.notEqual(none.choices[0].finish_reason, "tool_calls");
            const plain = await openai.chat.completions.create({ model: MODEL_ID, messages: ask, seed: 5, max_tokens: 12 });
            if (fam.template !== "chatml") // a template that reads tools shows them
                assert.ok(none.usage.prompt_tokens > plain.usage.prompt_tokens + 20);
        });
    });
}

describe("tool calls: n, log-probs and errors", () => {
    let server, openai;
    before(async () => {
        server = await startServer(["--parallel", "4", "--chat-template", path.join(SHARED, "chat_templates/hermes_2_pro_tool_use.jinja")]);
        openai = client(server);
    });
    after(async () => assertCleanExit(assert, await server.stop()));

    test("n = 3: every choice is a valid call", async () => {
        const r = await openai.chat.completions.create({ model: MODEL_ID, messages: ask, tools, tool_choice: "required", n: 3, seed: 9, max_tokens: 200 });
        assert.equal(r.choices.length, 3);
        for (const c of r.choices) assertCalls(c.message.tool_calls);
    });

    test("log-probs cover the same tokens streamed or not", async () => {
        const args = { model: MODEL_ID, messages: ask, tools, tool_choice: "required", seed: 8, max_tokens: 200, logprobs: true };
        const whole = await openai.chat.completions.create(args);
        const stream = await openai.chat.completions.create({ ...args, stream: true });
        const lps = [];
        for await (const chunk of stream) for (const c of chunk.choices) lps.push(...(c.logprobs?.content ?? []));
        assert.equal(lps.length, whole.choices[0].logprobs.content.length);
        assert.deepEqual(lps.map((x) => x.token), whole.choices[0].logprobs.content.map((x) => x.token));
    });

    test("invalid tools and tool messages are 400 with the field named", async () => {
        const fn = (f) => ({ type: "function", function: f });
        const cases = [
            [{ tools: [fn({ description: "no name" })] }, "tools[0].function.name"],
            [{ tools: [fn({ name: "a" }), fn({ name: "a" })] }, "tools[1]"],
            [{ tools: [fn({ name: "a" })], tool_choice: { type: "function", function: { name: "b" } } }, "tool_choice"],
            [{ tools: [fn({ name: "a" })], tool_choice: "always" }, "tool_choice"],
            [{ tool_choice: "required" }, "tool_choice"],
            [{ tools: [{ type: "retrieval" }] }, "tools[0].type"],
            [{ tools: [fn({ name: "a", parameters: { type: "object", properties: { x: { $ref: "#/nowhere" } } } })] }, "tools[0].function.parameters"],
            [{ tools: [fn({ name: "a", parameters: { type: "array" } })] }, "tools[0].function.parameters"],
            [{ tools: [fn({ name: "a", parameters: { type: "object", not: { required: ["x"] } } })], tool_choice: "required" }, "tools[0].function.parameters"],
            [{ tools: [fn({ name: "a" })], tool_choice: "required", response_format: { type: "json_object" } }, "tool_choice"],
            [{ messages: [...ask, { role: "tool", tool_call_id: "call_x", content: "1" }] }, "messages"],
            [{ messages: [{ role: "assistant", content: null, tool_calls: [{ id: "c", type: "function", function: { name: "a" } }] }] }, "messages"],
        ];
        for (const [extra, param] of cases) {
            const r = await request(server, "POST", "/v1/chat/completions", { body: { messages: ask, max_tokens: 4, ...extra } });
            assert.equal(r.status, 400, r.text);
            assert.equal(r.json.error.param, param, r.text);
            assert.equal(r.json.error.type, "invalid_request_error");
        }
        await assert.rejects(openai.chat.completions.create({ model: MODEL_ID, messages: ask, tools, tool_choice: { type: "function", function: { name: "fly" } } }),
            (e) => e instanceof OpenAI.BadRequestError && e.param === "tool_choice");
    });

    test("a schema the grammar cannot follow is fine when nothing is forced", async () => {
        // (the Hermes template needs a description)
        const t = [{ type: "function", function: { name: "a", description: "A.", parameters: { type: "object", not: { required: ["x"] } } } }];
        const r = await openai.chat.completions.create({ model: MODEL_ID, messages: ask, tools: t, max_tokens: 8, seed: 1 });
        assert.equal(r.choices[0].message.role, "assistant");
    });
});
