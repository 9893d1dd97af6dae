// The families of issue 21 served: gpt-oss (tiny, random weights, served
// with its harmony chat template) and Qwen 3.5 (tiny qwen35: Gated DeltaNet
// layers with a recurrent state beside gated attention).
//  - gpt-oss's tool calls: the weights know nothing, so the answer is forced
//    with the regex extension into the harmony messages gpt-oss writes (an
//    analysis message, then a message to functions.get_weather on the
//    commentary channel); what is checked is that the chat completions
//    (whole and streamed), Responses and Anthropic Messages APIs return the
//    analysis as thinking and the message as a tool call, finish_reason
//    tool_calls, and that the call and its result go back through the
//    template in the next request.
//  - prefix reuse over a recurrent state: a second request sharing a long
//    prompt prefix with the first reports the prefix as cached and gives the
//    greedy tokens a fresh server gives.
import assert from "node:assert/strict";
import fs from "node:fs";
import path from "node:path";
import { after, before, describe, test } from "node:test";
import Anthropic from "@anthropic-ai/sdk";
import { SHARED, archModel, assertCleanExit, client, request, startServer, template } from "./helpers.mjs";

process.env.SOURCE_DATE_EPOCH = "1795219200"; // strftime_now: the expected files' 2026-11-21

const regexOf = (s) => s.replace(/[.*+?^${}()|[\]\\]/g, "\\$&");
const tools = [{
    type: "function",
    function: { name: "get_weather", description: "Weather", parameters: { type: "object", properties: { city: { type: "string" } }, required: ["city"] } },
}];
const ask = [{ role: "user", content: "What is the weather in Paris?" }];
const ANALYSIS = "<|channel|>analysis<|message|>Need the weather.<|end|>";
const CALL = "<|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{\"city\": \"Paris\"}<|call|>";

describe("gpt-oss: harmony tool calls", () => {
    let server, openai, model;
    before(async () => {
        const file = archModel("gpt-oss-s1-neox2048", "gpt-oss", 1, "ggml-vocab-gpt-neox.gguf", ["--sliding-window", "16"]);
        model = file.split("/").pop();
        server = await startServer(["--chat-template", template("gpt_oss_120b"), "-c", "2048", "--parallel", "1"], { model: file });
        openai = client(server);
    });
    after(async () => assertCleanExit(assert, await server.stop()));

    test("chat completions: analysis as reasoning_content, the call as tool_calls, whole and streamed", async () => {
        const regex = regexOf(ANALYSIS + CALL);
        const r = await openai.chat.completions.create({ messages: ask, tools, max_tokens: 300, regex });
        const m = r.choices[0].message;
        assert.equal(m.reasoning_content, "Need the weather.");
        assert.equal(m.content, null);
        assert.equal(m.tool_calls.length, 1, JSON.stringify(m));
        assert.equal(m.tool_calls[0].type, "function");
        assert.equal(m.tool_calls[0].function.name, "get_weather");
        assert.equal(m.tool_calls[0].function.arguments, "{\"city\":\"Paris\"}");
        assert.match(m.tool_calls[0].id, /^call_[A-Za-z0-9]{24}$/);
        assert.equal(r.choices[0].finish_reason, "tool_calls");
        const stream = await openai.chat.completions.create({ messages: ask, tools, max_tokens: 300, regex, stream: true });
        let reasoning = "", content = "", args = "", name = "", finish = null;
        for await (const chunk of stream) {
            const c = chunk.choices[0];
            if (!c) continue;
            reasoning += c.delta?.reasoning_content ?? "";
            content += c.delta?.content ?? "";
            for (const tc of c.delta?.tool_calls ?? []) {
                assert.equal(tc.index, 0);
                name += tc.function?.name ?? "";
                args += tc.function?.arguments ?? "";
            }
            if (c.finish_reason) finish = c.finish_reason;
        }
        assert.equal(reasoning, "Need the weather.");
        assert.equal(content, "");
        assert.equal(name, "get_weather");
        assert.equal(args, "{\"city\":\"Paris\"}");
        assert.equal(finish, "tool_calls");
    });

    test("without tools the message to functions.get_weather stays content; a final answer is content", async () => {
        const r = await openai.chat.completions.create({ messages: ask, max_tokens: 300, regex: regexOf(ANALYSIS + CALL) });
        assert.equal(r.choices[0].message.tool_calls, undefined);
        assert.equal(r.choices[0].message.content,
            "<|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{\"city\": \"Paris\"}");
        const f = await openai.chat.completions.create({ messages: ask, tools, max_tokens: 300,
            regex: regexOf(ANALYSIS + "<|start|>assistant<|channel|>final<|message|>Sunny.") });
        assert.equal(f.choices[0].message.reasoning_content, "Need the weather.");
        assert.equal(f.choices[0].message.content, "Sunny.");
        assert.equal(f.choices[0].finish_reason, "stop");
    });

    test("the call and its result go back through the template", async () => {
        // the f_tools conversation of shared/chat_templates, whose rendering by
        // Jinja2 is in expected/gpt_oss_120b.f_tools.txt, continued with the
        // call and its result: the template adds them as harmony messages
        const f = JSON.parse(fs.readFileSync(path.join(SHARED, "chat_templates/cases.json"), "utf8")).f_tools;
        const jinja = fs.readFileSync(path.join(SHARED, "chat_templates/expected/gpt_oss_120b.f_tools.txt"), "utf8");
        const first = await openai.chat.completions.create({ messages: f.messages, tools: f.tools, max_tokens: 300, regex: regexOf(ANALYSIS + CALL) });
        const call = first.choices[0].message;
        assert.equal(call.tool_calls.length, 1);
        const turn2 = [...f.messages, call, { role: "tool", tool_call_id: call.tool_calls[0].id, content: "sunny, 21 C" }];
        assert.ok(jinja.endsWith("<|start|>assistant"));
        const want = jinja + "<|channel|>analysis<|message|>Need the weather.<|end|>" +
            "<|start|>assistant to=functions.get_weather<|channel|>commentary json<|message|>{\"city\": \"Paris\"}<|call|>" +
            "<|start|>functions.get_weather to=assistant<|channel|>commentary<|message|>\"sunny, 21 C\"<|end|><|start|>assistant";
        // the chat request's prompt is that text: as many tokens, and the same greedy answer
        const chat = await openai.chat.completions.create({ messages: turn2, tools: f.tools, tool_choice: "none", max_tokens: 12, temperature: 0, logprobs: true });
        const raw = await openai.completions.create({ prompt: want, parse_special: true, max_tokens: 12, temperature: 0, logprobs: 0 });
        assert.equal(chat.usage.prompt_tokens, raw.usage.prompt_tokens);
        assert.deepEqual(chat.choices[0].logprobs.content.map((t) => t.token), raw.choices[0].logprobs.tokens);
    });

    test("Responses API: a reasoning item and a function_call item", async () => {
        const r = await openai.responses.create({ input: "What is the weather in Paris?", tools: [{ type: "function", name: "get_weather", description: "Weather",
            parameters: tools[0].function.parameters }], max_output_tokens: 300, regex: regexOf(ANALYSIS + CALL) });
        const call = r.output.find((o) => o.type === "function_call");
        assert.ok(call, JSON.stringify(r.output));
        assert.equal(call.name, "get_weather");
        assert.equal(call.arguments, "{\"city\":\"Paris\"}");
        assert.ok(!r.output.some((o) => o.type === "message"), JSON.stringify(r.output));
        const reasoning = r.output.find((o) => o.type === "reasoning");
        assert.ok(reasoning, JSON.stringify(r.output));
        assert.ok(JSON.stringify(reasoning).includes("Need the weather."));
    });

    test("Anthropic Messages: a thinking block and a tool_use block, stop_reason tool_use", async () => {
        const claude = new Anthropic({ baseURL: `http://127.0.0.1:${server.port}`, apiKey: "sk-no-key", maxRetries: 0 });
        const m = await claude.messages.create({ model, max_tokens: 300, messages: ask, regex: regexOf(ANALYSIS + CALL),
            tools: [{ name: "get_weather", description: "Weather", input_schema: tools[0].function.parameters }] });
        assert.equal(m.stop_reason, "tool_use");
        const use = m.content.find((b) => b.type === "tool_use");
        assert.ok(use, JSON.stringify(m.content));
        assert.equal(use.name, "get_weather");
        assert.deepEqual(use.input, { city: "Paris" });
        const thinking = m.content.find((b) => b.type === "thinking");
        assert.equal(thinking?.thinking, "Need the weather.", JSON.stringify(m.content));
        assert.ok(!m.content.some((b) => b.type === "text" && b.text), JSON.stringify(m.content));
    });
});

describe("Qwen 3.5: prefix reuse over the recurrent state", () => {
    let model;
    before(() => {
        model = archModel("qwen35-s5-spm2048", "qwen35", 5, "ggml-vocab-llama-spm.gguf");
    });

    test("requests sharing a long prefix reuse it and answer as a fresh server does", async () => {
        // two token prompts that share 200 tokens and then differ, and a
        // conversation's second turn (which shares the first turn's prompt
        // and answer): greedy, on one slot
        const prefix = Array.from({ length: 200 }, (_, i) => 3 + ((i * 7919 + 13) % 2000));
        const a = [...prefix, 11, 12, 13, 14], b = [...prefix, 21, 22, 23];
        const msgs = [{ role: "user", content: "the cat sat on the mat and the cat sat on the mat and then the dog came in" }];
        const body = { max_tokens: 24, temperature: 0 };
        const runAll = async (server, { check }) => {
            const openai = client(server);
            const ra = await openai.completions.create({ ...body, prompt: a });
            const rb = await openai.completions.create({ ...body, prompt: b });
            const t1 = await openai.chat.completions.create({ ...body, messages: msgs });
            const turn2 = [...msgs, t1.choices[0].message, { role: "user", content: "and then?" }];
            const t2 = await openai.chat.completions.create({ ...body, messages: turn2 });
            if (check) {
                // the state goes back to the checkpoint before the shared 200
                // tokens (one every 64 positions) and reads the rest again
                const cached = rb.usage.prompt_tokens_details.cached_tokens;
                assert.ok(cached > prefix.length - 64 && cached <= prefix.length, `cached ${cached} of ${rb.usage.prompt_tokens}`);
                // the second turn goes back at least to the state kept before
                // the first turn's last prompt token (its answer's states are
                // checkpoints that later steps may have taken the slots of)
                assert.ok(t2.usage.prompt_tokens_details.cached_tokens >= t1.usage.prompt_tokens - 1,
                    `cached ${t2.usage.prompt_tokens_details.cached_tokens} of ${t2.usage.prompt_tokens}`);
            }
            return [ra.choices[0].text, rb.choices[0].text, t1.choices[0].message.content, t2.choices[0].message.content];
        };
        const warm = await startServer(["-c", "1024", "--parallel", "1"], { model });
        let reused;
        try {
            reused = await runAll(warm, { check: true });
        } finally {
            assertCleanExit(assert, await warm.stop());
        }
        // each request alone on a fresh server (nothing cached)
        const fresh = [];
        for (let i = 0; i < 4; i++) {
            const server = await startServer(["-c", "1024", "--parallel", "1"], { model });
            try {
                const openai = client(server);
                if (i === 0) fresh.push((await openai.completions.create({ ...body, prompt: a })).choices[0].text);
                if (i === 1) fresh.push((await openai.completions.create({ ...body, prompt: b })).choices[0].text);
                if (i === 2) fresh.push((await openai.chat.completions.create({ ...body, messages: msgs })).choices[0].message.content);
                if (i === 3) {
                    const turn2 = [...msgs, { role: "assistant", content: reused[2] }, { role: "user", content: "and then?" }];
                    const r = await openai.chat.completions.create({ ...body, messages: turn2 });
                    assert.equal(r.usage.prompt_tokens_details.cached_tokens, 0);
                    fresh.push(r.choices[0].message.content);
                }
            } finally {
                assertCleanExit(assert, await server.stop());
            }
        }
        assert.deepEqual(reused, fresh);
        assert.ok(new Set(reused).size > 1, "the answers differ");
    });
});
