// OpenAI's Responses API through the official client (responses.create,
// retrieve, delete): a text or items as input, instructions, the answer as
// output items (output_text the same greedy text and the same token counts
// as the chat completion of the same conversation), the streaming events in
// the API's order with their sequence numbers, a function tool and its
// function_call_output, previous_response_id carrying the conversation (and
// not the instructions), input_items listing a response's items in pages,
// store: false, a reasoning model's thinking as a
// reasoning item, and errors naming the Responses API's fields.
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import { MODEL_ID, assertCleanExit, client, request, startServer, template, thinkingModel } from "./helpers.mjs";

const story = "Tell me a story about a cat.";
const tool = {
    type: "function", name: "get_weather", description: "Get the weather for a city.",
    parameters: { type: "object", properties: { city: { type: "string", maxLength: 10 } }, required: ["city"], additionalProperties: false },
};

// The events of a streamed response, checked for what every stream obeys.
async function events(stream) {
    const all = [];
    for await (const e of stream) all.push(e);
    all.forEach((e, i) => assert.equal(e.sequence_number, i, `event ${i} (${e.type}) in order`));
    assert.equal(all[0].type, "response.created");
    assert.equal(all[0].response.status, "in_progress");
    assert.deepEqual(all[0].response.output, []);
    assert.equal(all[1].type, "response.in_progress");
    assert.match(all.at(-1).type, /^response\.(completed|incomplete)$/);
    // items open and close in turn, each with its output_index
    let open = null, index = 0;
    for (const e of all.slice(2, -1)) {
        if (e.type === "response.output_item.added") {
            assert.equal(open, null, "one item at a time");
            assert.equal(e.output_index, index);
            open = e.item;
        } else if (e.type === "response.output_item.done") {
            assert.equal(e.item.id, open.id);
            open = null;
            index++;
        } else {
            assert.equal(e.item_id, open.id, `${e.type} belongs to the open item`);
            assert.equal(e.output_index, index);
        }
    }
    assert.equal(open, null);
    return all;
}

// The concatenated deltas of one kind.
const deltas = (all, type) => all.filter((e) => e.type === type).map((e) => e.delta).join("");

describe("responses", () => {
    let server, openai;
    before(async () => {
        server = await startServer(["--parallel", "2", "--ctx", "2048"]);
        openai = client(server);
    });
    after(async () => assertCleanExit(assert, await server.stop()));

    test("create: input and instructions give the chat completion's text and counts", async () => {
        const r = await openai.responses.create({ model: MODEL_ID, input: story, instructions: "Be brief.",
            max_output_tokens: 24, temperature: 0 });
        const chat = await openai.chat.completions.create({ model: MODEL_ID, max_tokens: 24, temperature: 0,
            messages: [{ role: "system", content: "Be brief." }, { role: "user", content: story }] });
        assert.match(r.id, /^resp_[0-9a-f]{24}$/);
        assert.equal(r.object, "response");
        assert.equal(r.model, MODEL_ID);
        assert.equal(r.instructions, "Be brief.");
        assert.equal(r.output.length, 1);
        const [msg] = r.output;
        assert.equal(msg.type, "message");
        assert.equal(msg.role, "assistant");
        assert.match(msg.id, /^msg_/);
        assert.equal(msg.content[0].type, "output_text");
        assert.equal(r.output_text, chat.choices[0].message.content);
        assert.ok(r.output_text.length > 0);
        assert.equal(r.usage.input_tokens, chat.usage.prompt_tokens);
        assert.equal(r.usage.output_tokens, chat.usage.completion_tokens);
        assert.equal(r.usage.total_tokens, r.usage.input_tokens + r.usage.output_tokens);
        if (chat.choices[0].finish_reason === "length") {
            assert.equal(r.status, "incomplete");
            assert.deepEqual(r.incomplete_details, { reason: "max_output_tokens" });
        } else {
            assert.equal(r.status, "completed");
        }
        // items as input: the same conversation as messages with text parts
        const items = await openai.responses.create({ model: MODEL_ID, max_output_tokens: 24, temperature: 0, input: [
            { role: "system", content: "Be brief." },
            { type: "message", role: "user", content: [{ type: "input_text", text: story }] }] });
        assert.equal(items.output_text, r.output_text);
        assert.equal(items.usage.input_tokens, r.usage.input_tokens);
    });

    test("retrieve and delete a stored response; store: false keeps none", async () => {
        const r = await openai.responses.create({ input: story, max_output_tokens: 8, temperature: 0, metadata: { k: "v" } });
        const got = await openai.responses.retrieve(r.id);
        assert.equal(got.id, r.id);
        assert.equal(got.output_text, r.output_text);
        assert.deepEqual(got.metadata, { k: "v" });
        await openai.responses.delete(r.id);
        await assert.rejects(openai.responses.retrieve(r.id), (e) => e.status === 404 && /not found/.test(e.message));
        const del = await request(server, "DELETE", `/v1/responses/${r.id}`);
        assert.equal(del.status, 404);
        const gone = await openai.responses.create({ input: story, max_output_tokens: 8, temperature: 0, store: false });
        assert.equal(gone.store, false);
        await assert.rejects(openai.responses.retrieve(gone.id), (e) => e.status === 404);
        await assert.rejects(openai.responses.create({ input: "Hi", previous_response_id: gone.id }),
            (e) => e.status === 404 && e.param === "previous_response_id");
    });

    test("streamed: the API's events, and the same text as whole", async () => {
        const args = { input: story, instructions: "Be brief.", max_output_tokens: 24, temperature: 0 };
        const whole = await openai.responses.create(args);
        const all = await events(await openai.responses.create({ ...args, stream: true }));
        const types = all.map((e) => e.type);
        assert.deepEqual(types.slice(0, 4), ["response.created", "response.in_progress",
            "response.output_item.added", "response.content_part.added"]);
        assert.deepEqual(types.slice(-4), ["response.output_text.done", "response.content_part.done",
            "response.output_item.done", whole.status === "completed" ? "response.completed" : "response.incomplete"]);
        assert.ok(types.includes("response.output_text.delta"));
        const text = deltas(all, "response.output_text.delta");
        assert.equal(text, whole.output_text);
        assert.equal(all.find((e) => e.type === "response.output_text.done").text, text);
        const end = all.at(-1).response;
        assert.equal(end.output[0].content[0].text, text);
        assert.equal(end.usage.input_tokens, whole.usage.input_tokens);
        assert.equal(end.usage.output_tokens, whole.usage.output_tokens);
        assert.equal((await openai.responses.retrieve(end.id)).output[0].content[0].text, text);
    });

    test("a function tool: the call, its output, and previous_response_id", async () => {
        const args = { tools: [tool], tool_choice: { type: "function", name: "get_weather" }, max_output_tokens: 120, seed: 4 };
        const r = await openai.responses.create({ ...args, input: "What is the weather in Paris?" });
        const call = r.output.find((o) => o.type === "function_call");
        assert.ok(call, JSON.stringify(r.output));
        assert.equal(call.name, "get_weather");
        assert.match(call.call_id, /^call_/);
        assert.match(call.id, /^fc_/);
        assert.equal(typeof JSON.parse(call.arguments).city, "string");
        assert.deepEqual(r.tools, [tool]);
        // streamed: the arguments' deltas make the call
        const all = await events(await openai.responses.create({ ...args, input: "What is the weather in Paris?", stream: true }));
        const done = all.find((e) => e.type === "response.function_call_arguments.done");
        assert.equal(done.name, "get_weather");
        assert.equal(deltas(all, "response.function_call_arguments.delta"), done.arguments);
        assert.equal(done.arguments, call.arguments, "the same call as whole (same seed)");
        // the tool's output, chained: the prompt is the whole conversation
        const next = await openai.responses.create({ previous_response_id: r.id, tools: [tool], max_output_tokens: 8, temperature: 0,
            input: [{ type: "function_call_output", call_id: call.call_id, output: "sunny" }] });
        assert.equal(next.previous_response_id, r.id);
        const chat = await openai.chat.completions.create({ max_tokens: 8, temperature: 0,
            tools: [{ type: "function", function: { name: tool.name, description: tool.description, parameters: tool.parameters } }],
            messages: [{ role: "user", content: "What is the weather in Paris?" },
                { role: "assistant", content: "", tool_calls: [{ id: call.call_id, type: "function", function: { name: call.name, arguments: call.arguments } }] },
                { role: "tool", tool_call_id: call.call_id, content: "sunny" }] });
        assert.equal(next.usage.input_tokens, chat.usage.prompt_tokens);
        assert.equal(next.output_text, chat.choices[0].message.content);
        // the same conversation sent whole, as items
        const items = await openai.responses.create({ tools: [tool], max_output_tokens: 8, temperature: 0, input: [
            { role: "user", content: "What is the weather in Paris?" }, call,
            { type: "function_call_output", call_id: call.call_id, output: "sunny" }] });
        assert.equal(items.usage.input_tokens, next.usage.input_tokens);
        await assert.rejects(openai.responses.create({ input: [{ type: "function_call_output", call_id: "call_x", output: "sunny" }] }),
            (e) => e.status === 400 && /no function_call with call_id 'call_x'/.test(e.message));
    });

    test("previous_response_id: the conversation goes on, its instructions do not", async () => {
        const first = await openai.responses.create({ input: "Once upon a time", instructions: "Be brief.", max_output_tokens: 10, temperature: 0 });
        const second = await openai.responses.create({ previous_response_id: first.id, input: "And then?", max_output_tokens: 10, temperature: 0 });
        const chat = await openai.chat.completions.create({ max_tokens: 10, temperature: 0, messages: [
            { role: "user", content: "Once upon a time" }, { role: "assistant", content: first.output_text },
            { role: "user", content: "And then?" }] });
        assert.equal(second.usage.input_tokens, chat.usage.prompt_tokens);
        assert.equal(second.output_text, chat.choices[0].message.content);
        assert.equal(second.instructions, null);
        const third = await openai.responses.create({ previous_response_id: second.id, input: "The end.", max_output_tokens: 4, temperature: 0 });
        assert.ok(third.usage.input_tokens > second.usage.input_tokens + second.usage.output_tokens);
    });

    test("input_items: a response's items, its chain's first, in pages", async () => {
        const first = await openai.responses.create({ max_output_tokens: 6, temperature: 0, input: [
            { role: "user", content: "Once upon a time" },
            { type: "message", role: "assistant", content: [{ type: "output_text", text: "there was" }] },
            { role: "user", content: "a cat." }] });
        const firstItems = [];
        for await (const it of openai.responses.inputItems.list(first.id, { order: "asc" })) firstItems.push(it);
        assert.deepEqual(firstItems.map((it) => [it.type, it.role, it.content[0].type, it.content[0].text, it.status]), [
            ["message", "user", "input_text", "Once upon a time", "completed"],
            ["message", "assistant", "output_text", "there was", "completed"],
            ["message", "user", "input_text", "a cat.", "completed"]]);
        firstItems.forEach((it) => assert.match(it.id, /^msg_[0-9a-f]{24}$/));
        // chained: the first response's input items, its output, then the new input
        const second = await openai.responses.create({ previous_response_id: first.id, input: "And then?", max_output_tokens: 4, temperature: 0 });
        const page = await openai.responses.inputItems.list(second.id, { order: "asc", limit: 2 });
        assert.deepEqual(page.data.map((it) => it.id), firstItems.slice(0, 2).map((it) => it.id));
        assert.equal(page.has_more, true);
        const raw = (await request(server, "GET", `/v1/responses/${second.id}/input_items?order=asc&limit=2`)).json;
        assert.equal(raw.object, "list");
        assert.equal(raw.first_id, firstItems[0].id);
        assert.equal(raw.last_id, firstItems[1].id);
        const all = [];
        for await (const it of openai.responses.inputItems.list(second.id, { order: "asc", limit: 2 })) all.push(it);
        assert.deepEqual(all.map((it) => it.id), [...firstItems.map((it) => it.id), first.output[0].id, all[4].id]);
        assert.deepEqual(all[3], first.output[0], "the first response's output item as it was returned");
        assert.equal(all[4].content[0].text, "And then?");
        // newest first by default
        const desc = await openai.responses.inputItems.list(second.id);
        assert.deepEqual(desc.data.map((it) => it.id), all.map((it) => it.id).reverse());
        assert.equal(desc.has_more, false);
        const after = await openai.responses.inputItems.list(second.id, { after: all[4].id, limit: 1 });
        assert.deepEqual(after.data.map((it) => it.id), [all[3].id]);
        for (const [query, param, pattern] of [["limit=0", "limit", /from 1 to 100/], ["limit=101", "limit", /from 1 to 100/],
            ["order=up", "order", /'asc' or 'desc'/], ["after=msg_nope", "after", /no input item 'msg_nope'/],
            ["include=bogus", "include", /unknown value 'bogus'/], ["page=2", "page", /unknown query parameter 'page'/]]) {
            const r = await request(server, "GET", `/v1/responses/${second.id}/input_items?${query}`);
            assert.equal(r.status, 400, `${query}: ${r.text}`);
            assert.equal(r.json.error.param, param, query);
            assert.match(r.json.error.message, pattern, query);
        }
        assert.equal((await request(server, "GET", "/v1/responses/resp_nope/input_items")).status, 404);
        await openai.responses.delete(first.id);
        assert.equal((await request(server, "GET", `/v1/responses/${first.id}/input_items`)).status, 404);
    });

    test("errors name the Responses API's fields", async () => {
        const cases = [
            [{ input: story, bogus: 1 }, 400, /unknown field 'bogus'/, "bogus"],
            [{}, 400, /'input' is required/, "input"],
            [{ input: [{ role: "user", content: [{ type: "input_image", image_url: "x" }] }] }, 400, /input_image' is not supported/, "input"],
            [{ input: [{ type: "web_search_call", id: "x" }] }, 400, /items of type 'web_search_call' are not supported/, "input"],
            [{ input: story, tools: [{ type: "web_search" }] }, 400, /tools of type 'web_search' are not supported/, "tools"],
            [{ input: story, tools: [{ ...tool, name: "a b" }] }, 400, /'tools\[0\]\.name' must be a function name/, "tools[0].name"],
            [{ input: story, tools: [{ ...tool, parameters: { type: "object", properties: 5 } }] }, 400, /tools\[0\]\.parameters/, "tools[0].parameters"],
            [{ input: story, max_output_tokens: 0 }, 400, /max_output_tokens/, "max_output_tokens"],
            [{ input: story, text: { format: { type: "json_schema", name: "x", schema: 5 } } }, 400, /text\.format/, "text.format"],
            [{ input: story, reasoning: { effort: "high" } }, 400, /reasoning\.effort/, "reasoning.effort"],
            [{ input: story, background: true }, 400, /'background' responses are not supported/, "background"],
            [{ input: story, truncation: "auto" }, 400, /only "disabled"/, "truncation"],
            [{ input: story, model: "nope" }, 404, /nope/, null],
        ];
        for (const [body, status, pattern, param] of cases) {
            const r = await request(server, "POST", "/v1/responses", { body });
            assert.equal(r.status, status, `${JSON.stringify(body)}: ${r.text}`);
            assert.match(r.json.error.message, pattern, JSON.stringify(body));
            if (param) assert.equal(r.json.error.param, param, JSON.stringify(body));
        }
        assert.equal((await request(server, "GET", "/v1/responses/resp_nope")).status, 404);
    });
});

describe("responses with a reasoning model", () => {
    const THINK = "<think>\nThe user wants the weather.\n</think>\n\n";
    const regex = (THINK + "It is sunny.").replace(/[.*+?^${}()|[\]\\]/g, "\\$&");
    let server, openai;
    before(async () => {
        server = await startServer(["--chat-template", template("qwen3_0_6b"), "-c", "1024", "--parallel", "2"], { model: thinkingModel() });
        openai = client(server);
    });
    after(async () => assertCleanExit(assert, await server.stop()));

    test("the thinking is a reasoning item before the message, whole and streamed", async () => {
        const args = { input: "What is the weather in Paris?", max_output_tokens: 80, regex, seed: 1 };
        const r = await openai.responses.create(args);
        assert.deepEqual(r.output.map((o) => o.type), ["reasoning", "message"]);
        assert.match(r.output[0].id, /^rs_/);
        assert.deepEqual(r.output[0].content, [{ type: "reasoning_text", text: "The user wants the weather." }]);
        assert.equal(r.output_text, "It is sunny.");
        assert.ok(r.usage.output_tokens_details.reasoning_tokens > 0);
        assert.ok(r.usage.output_tokens_details.reasoning_tokens < r.usage.output_tokens);
        const all = await events(await openai.responses.create({ ...args, stream: true }));
        assert.equal(deltas(all, "response.reasoning_text.delta"), "The user wants the weather.");
        assert.equal(deltas(all, "response.output_text.delta"), "It is sunny.");
        const first = all.findIndex((e) => e.type === "response.output_text.delta");
        assert.ok(all.findLastIndex((e) => e.type === "response.reasoning_text.delta") < first);
        assert.deepEqual(all.at(-1).response.output.map((o) => o.type), ["reasoning", "message"]);
        // reasoning.effort is the template's switch: "none" closes the thinking in the prompt
        const off = await openai.responses.create({ input: "Hi", reasoning: { effort: "none" }, max_output_tokens: 3, seed: 1 });
        const on = await openai.responses.create({ input: "Hi", max_output_tokens: 3, seed: 1 });
        assert.ok(off.usage.input_tokens > on.usage.input_tokens, "an empty think block is added to the prompt");
        assert.equal(off.reasoning.effort, "none");
    });
});

describe("--max-responses", () => {
    test("the oldest responses are forgotten first", async () => {
        const server = await startServer(["--max-responses", "2"]);
        try {
            const openai = client(server);
            const made = [];
            for (let i = 0; i < 3; i++) made.push(await openai.responses.create({ input: `Story ${i}`, max_output_tokens: 2, temperature: 0 }));
            await assert.rejects(openai.responses.retrieve(made[0].id), (e) => e.status === 404);
            for (const r of made.slice(1)) assert.equal((await openai.responses.retrieve(r.id)).output_text, r.output_text);
            await assert.rejects(openai.responses.create({ input: "Hi", previous_response_id: made[0].id }), (e) => e.status === 404);
        } finally {
            assertCleanExit(assert, await server.stop());
        }
    });
});
