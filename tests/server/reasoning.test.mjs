// Reasoning models through the official client: a tiny Qwen3 (random
// weights, the real Qwen tokenizer) served with Qwen3's own chat template
// and with DeepSeek-R1's. The weights know nothing, so the answers that
// matter are forced with the regex extension into the shape these models
// write ("<think>\n...\n</think>\n\n" then the answer): what is checked is
// the split into message.reasoning_content / delta.reasoning_content and
// content, tool calls after the thinking, the template's switch
// (chat_template_kwargs, reasoning_effort) reaching the prompt, earlier
// thinking kept out of the prompt as the template wants, and the thinking
// budget closing the block after max_thinking_tokens tokens.
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import { assertCleanExit, client, request, startServer, template, thinkingModel } from "./helpers.mjs";

const ask = [{ role: "user", content: "What is the weather in Paris?" }];
const THINK = "<think>\nThe user wants the weather.\n</think>\n\n";
const regexOf = (s) => s.replace(/[.*+?^${}()|[\]\\]/g, "\\$&");

const tools = [{
    type: "function",
    function: { name: "get_weather", description: "Weather", parameters: { type: "object", properties: { city: { type: "string" } }, required: ["city"] } },
}];

// The thinking model with a template of shared/chat_templates (prompts with
// tools need more than its 256 tokens of context).
const serveThinking = (name) =>
    startServer(["--chat-template", template(name), "-c", "1024", "--parallel", "2"], { model: thinkingModel() });

// Token ids of text in the served model's vocabulary.
async function tokens(server, content) {
    const r = await request(server, "POST", "/tokenize", { body: { content, with_pieces: true } });
    assert.equal(r.status, 200, r.text);
    return r.json.tokens;
}

describe("Qwen3's template", () => {
    let server, openai;
    before(async () => {
        server = await serveThinking("qwen3_0_6b");
        openai = client(server);
    });
    after(async () => assertCleanExit(assert, await server.stop()));

    test("the thinking is split from the answer, whole and streamed", async () => {
        const regex = regexOf(THINK + "It is sunny.");
        const r = await openai.chat.completions.create({ messages: ask, max_tokens: 80, regex, seed: 1 });
        const m = r.choices[0].message;
        assert.equal(m.reasoning_content, "The user wants the weather.");
        assert.equal(m.content, "It is sunny.");
        assert.equal(r.choices[0].finish_reason, "stop");
        const stream = await openai.chat.completions.create({ messages: ask, max_tokens: 80, regex, seed: 1, stream: true });
        let reasoning = "", content = "", order = "";
        for await (const chunk of stream) {
            const d = chunk.choices[0]?.delta ?? {};
            if (d.reasoning_content) reasoning += d.reasoning_content, order += "r";
            if (d.content) content += d.content, order += "c";
        }
        assert.equal(reasoning, m.reasoning_content);
        assert.equal(content, m.content);
        assert.match(order, /^r+c+$/, "all the thinking comes before the answer");
    });

    test("an answer without thinking has no reasoning_content", async () => {
        const r = await openai.chat.completions.create({ messages: ask, max_tokens: 40, regex: "It is sunny\\." });
        assert.equal(r.choices[0].message.content, "It is sunny.");
        assert.equal(r.choices[0].message.reasoning_content, undefined);
    });

    test("a tool call after the thinking is parsed; the thinking is not content", async () => {
        const call = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>';
        const regex = regexOf("<think>\nI will use <tool_call> to look.\n</think>\n\n" + call);
        const r = await openai.chat.completions.create({ messages: ask, tools, max_tokens: 200, regex });
        const m = r.choices[0].message;
        assert.equal(m.reasoning_content, "I will use <tool_call> to look.");
        assert.equal(m.content, null);
        assert.equal(m.tool_calls.length, 1);
        assert.equal(m.tool_calls[0].function.name, "get_weather");
        assert.deepEqual(JSON.parse(m.tool_calls[0].function.arguments), { city: "Paris" });
        assert.equal(r.choices[0].finish_reason, "tool_calls");
        const stream = await openai.chat.completions.create({ messages: ask, tools, max_tokens: 200, regex, stream: true });
        let reasoning = "", name = "", args = "";
        for await (const chunk of stream) {
            const d = chunk.choices[0]?.delta ?? {};
            reasoning += d.reasoning_content ?? "";
            for (const tc of d.tool_calls ?? []) name += tc.function?.name ?? "", args += tc.function?.arguments ?? "";
        }
        assert.equal(reasoning, m.reasoning_content);
        assert.equal(name, "get_weather");
        assert.deepEqual(JSON.parse(args), { city: "Paris" });
    });

    test("enable_thinking false reaches the template (chat_template_kwargs, reasoning_effort none)", async () => {
        const base = await openai.chat.completions.create({ messages: ask, max_tokens: 1 });
        const empty = (await tokens(server, "<think>\n\n</think>\n\n")).length;
        const off = await openai.chat.completions.create({ messages: ask, max_tokens: 1, chat_template_kwargs: { enable_thinking: false } });
        assert.equal(off.usage.prompt_tokens, base.usage.prompt_tokens + empty);
        const none = await openai.chat.completions.create({ messages: ask, max_tokens: 1, reasoning_effort: "none" });
        assert.equal(none.usage.prompt_tokens, off.usage.prompt_tokens);
        const high = await openai.chat.completions.create({ messages: ask, max_tokens: 1, reasoning_effort: "high" });
        assert.equal(high.usage.prompt_tokens, base.usage.prompt_tokens);
    });

    test("earlier thinking stays out of the prompt; thinking after the last question goes in", async () => {
        const turns = (reasoning) => [
            { role: "user", content: "Hi" },
            { role: "assistant", content: "Hello!", ...(reasoning ? { reasoning_content: reasoning } : {}) },
            { role: "user", content: "Weather?" },
        ];
        const plain = await openai.chat.completions.create({ messages: turns(null), max_tokens: 1 });
        const withThought = await openai.chat.completions.create({ messages: turns("A greeting."), max_tokens: 1 });
        assert.equal(withThought.usage.prompt_tokens, plain.usage.prompt_tokens, "Qwen3's template drops it");
        // a tool call answered after the last question: its thinking is shown
        const step = (reasoning) => [
            ...ask,
            { role: "assistant", content: "", ...(reasoning ? { reasoning_content: reasoning } : {}),
              tool_calls: [{ id: "call_1", type: "function", function: { name: "get_weather", arguments: '{"city":"Paris"}' } }] },
            { role: "tool", tool_call_id: "call_1", content: "sunny" },
        ];
        const a = await openai.chat.completions.create({ messages: step(null), tools, max_tokens: 1 });
        const b = await openai.chat.completions.create({ messages: step("Look it up."), tools, max_tokens: 1 });
        const shown = (await tokens(server, "<think>\nLook it up.\n</think>\n\n")).length;
        assert.equal(b.usage.prompt_tokens, a.usage.prompt_tokens + shown);
    });

    test("bad reasoning fields are refused with the OpenAI error shape", async () => {
        const bad = [
            [{ reasoning_effort: "maximal" }, "reasoning_effort"],
            [{ chat_template_kwargs: "enable_thinking" }, "chat_template_kwargs"],
            [{ max_thinking_tokens: -1 }, "max_thinking_tokens"],
            [{ max_thinking_tokens: 5, reasoning_effort: "none" }, "max_thinking_tokens"],
        ];
        for (const [extra, param] of bad) {
            const r = await request(server, "POST", "/v1/chat/completions", { body: { messages: ask, ...extra } });
            assert.equal(r.status, 400, r.text);
            assert.equal(r.json.error.param, param);
            assert.equal(r.json.error.type, "invalid_request_error");
        }
    });
});

describe("DeepSeek-R1's template (the prompt opens the block)", () => {
    let server, openai;
    before(async () => {
        server = await serveThinking("deepseek_r1_distill_qwen_32b");
        openai = client(server);
    });
    after(async () => assertCleanExit(assert, await server.stop()));

    test("the answer starts inside the thinking", async () => {
        const r = await openai.chat.completions.create({ messages: ask, max_tokens: 60, regex: regexOf("Sunny, I guess.\n</think>\n\nSunny.") });
        assert.equal(r.choices[0].message.reasoning_content, "Sunny, I guess.");
        assert.equal(r.choices[0].message.content, "Sunny.");
    });

    test("max_thinking_tokens: after the budget the model is made to close its thinking", async () => {
        const close = await tokens(server, "\n</think>\n\n");
        for (const budget of [0, 3, 7]) {
            const r = await openai.chat.completions.create({ messages: ask, max_tokens: budget + close.length + 4, max_thinking_tokens: budget, temperature: 0, logprobs: true });
            const toks = r.choices[0].logprobs.content.map((t) => t.token);
            assert.equal(toks.length, budget + close.length + 4);
            assert.deepEqual(toks.slice(budget, budget + close.length), close.map((t) => t.piece), `budget ${budget}: ${JSON.stringify(toks)}`);
            const m = r.choices[0].message;
            assert.equal(m.reasoning_content ?? "", toks.slice(0, budget).join("").trim());
            assert.equal(m.content, toks.slice(budget + close.length).join("").trimStart());
        }
        // without a budget the same greedy answer thinks on
        const free = await openai.chat.completions.create({ messages: ask, max_tokens: 10, temperature: 0 });
        assert.equal(free.choices[0].message.content, "");
        assert.ok(free.choices[0].message.reasoning_content.length > 0);
    });

    test("reasoning_effort none closes the block in the prompt", async () => {
        const r = await openai.chat.completions.create({ messages: ask, max_tokens: 5, reasoning_effort: "none", temperature: 0 });
        assert.equal(r.choices[0].message.reasoning_content, undefined);
        assert.ok(r.choices[0].message.content.length > 0);
    });
});

describe("a template that does not think (stories260K)", () => {
    let server;
    before(async () => { server = await startServer(); });
    after(async () => assertCleanExit(assert, await server.stop()));

    test("reasoning is refused where the model cannot do it, accepted where it is a no-op", async () => {
        const post = (extra) => request(server, "POST", "/v1/chat/completions", { body: { messages: ask, max_tokens: 2, ...extra } });
        let r = await post({ reasoning_effort: "high" });
        assert.equal(r.status, 400, r.text);
        assert.equal(r.json.error.param, "reasoning_effort");
        r = await post({ max_thinking_tokens: 10 });
        assert.equal(r.status, 400, r.text);
        assert.equal(r.json.error.param, "max_thinking_tokens");
        r = await post({ reasoning_effort: "none" });
        assert.equal(r.status, 200, r.text);
        assert.equal(r.json.choices[0].message.reasoning_content, undefined);
    });
});
