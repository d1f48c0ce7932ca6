// Tool calls and structured output end to end: the official openai client (create with tools +
// tool_choice required, .stream() rebuilding the calls from deltas, response_format json_schema)
// and the ai SDK (@ai-sdk/openai-compatible) running a two-step tool loop to completion.
// Needs STRATA_BASE_URL (http://host:port/v1); STRATA_API_KEY and STRATA_MODEL are optional.
// The server's model has random weights: constrained decoding is what makes the calls valid.
import OpenAI from "openai";
import { generateText, tool, stepCountIs } from "ai";
import { createOpenAICompatible } from "@ai-sdk/openai-compatible";
import { z } from "zod";
import assert from "node:assert/strict";

const baseURL = process.env.STRATA_BASE_URL;
if (!baseURL) {
  console.error("set STRATA_BASE_URL, e.g. http://127.0.0.1:8080/v1");
  process.exit(2);
}
const apiKey = process.env.STRATA_API_KEY || "none";
const client = new OpenAI({ baseURL, apiKey, maxRetries: 0, timeout: 120_000 });
const model = process.env.STRATA_MODEL || "default";
const cities = ["Paris", "Oslo", "Lima"];
const weather = {
  type: "function",
  function: {
    name: "get_weather",
    description: "Current weather of a city",
    parameters: { type: "object", properties: { city: { type: "string", enum: cities } }, required: ["city"], additionalProperties: false },
  },
};
const messages = [{ role: "user", content: "What is the weather in Oslo?" }];
const base = { model, messages, tools: [weather], tool_choice: "required", parallel_tool_calls: false, max_tokens: 300, temperature: 1, seed: 3 };

// 1. create with tools + tool_choice required: one valid call.
const r = await client.chat.completions.create(base);
const msg = r.choices[0].message;
assert.equal(r.choices[0].finish_reason, "tool_calls", JSON.stringify(r));
assert.equal(msg.content, null);
assert.equal(msg.tool_calls.length, 1);
assert.equal(msg.tool_calls[0].type, "function");
assert.equal(msg.tool_calls[0].function.name, "get_weather");
assert.ok(cities.includes(JSON.parse(msg.tool_calls[0].function.arguments).city), msg.tool_calls[0].function.arguments);
console.log(`required: ${JSON.stringify(msg.tool_calls[0].function)}`);

// 2. .stream(): the client rebuilds the calls from the deltas; same seed, same call.
const s = client.chat.completions.stream(base);
let deltas = 0;
s.on("chunk", (c) => { if (c.choices[0]?.delta?.tool_calls) deltas++; });
const final = await s.finalChatCompletion();
assert.equal(final.choices[0].finish_reason, "tool_calls");
assert.deepEqual(final.choices[0].message.tool_calls.map((c) => c.function), msg.tool_calls.map((c) => c.function));
console.log(`stream: ${deltas} tool-call deltas rebuilt into the same call`);

// 2b. Cut off by max_tokens inside the call: finish_reason stays "length", the call so far comes as
// a call (the generic format closes its arguments), never as content; streamed the same.
const cut = { ...base, max_tokens: r.usage.completion_tokens - 1 };
const c = await client.chat.completions.create(cut);
assert.equal(c.choices[0].finish_reason, "length", JSON.stringify(c));
assert.equal(c.choices[0].message.content, null, "no call syntax in content");
assert.equal(c.choices[0].message.tool_calls[0].function.name, "get_weather");
assert.equal(typeof JSON.parse(c.choices[0].message.tool_calls[0].function.arguments), "object");
const cs = await client.chat.completions.stream(cut).finalChatCompletion();
assert.equal(cs.choices[0].finish_reason, "length");
assert.deepEqual(cs.choices[0].message.tool_calls.map((x) => x.function), c.choices[0].message.tool_calls.map((x) => x.function));
console.log(`cut at ${cut.max_tokens} tokens: ${JSON.stringify(c.choices[0].message.tool_calls[0].function)}`);

// 3. response_format json_schema: JSON that validates.
const colours = ["red", "green", "blue"];
const rf = await client.chat.completions.create({
  model, messages: [{ role: "user", content: "Pick a colour" }], max_tokens: 200, temperature: 1, seed: 4,
  response_format: { type: "json_schema", json_schema: { name: "pick", strict: true,
    schema: { type: "object", properties: { colour: { type: "string", enum: colours } }, required: ["colour"], additionalProperties: false } } },
});
const picked = JSON.parse(rf.choices[0].message.content);
assert.ok(colours.includes(picked.colour), rf.choices[0].message.content);
console.log(`json_schema: ${rf.choices[0].message.content}`);

// 4. The ai SDK: step 1 calls the tool (required), the SDK runs it and sends the result, step 2
// answers in text (tool choice none). One call per reply: a random model could go on listing calls.
const provider = createOpenAICompatible({ name: "strata", baseURL, apiKey });
let executed = 0;
const result = await generateText({
  model: provider(model),
  messages,
  tools: {
    get_weather: tool({
      description: "Current weather of a city",
      inputSchema: z.object({ city: z.enum(cities) }),
      execute: async ({ city }) => { executed++; return { city, temperature_c: 21, sky: "clear" }; },
    }),
  },
  prepareStep: ({ stepNumber }) => ({ toolChoice: stepNumber === 0 ? "required" : "none" }),
  stopWhen: stepCountIs(2),
  maxOutputTokens: 300,
  providerOptions: { strata: { parallel_tool_calls: false } },  // extra body fields of this provider
  temperature: 1,
  seed: 5,
  maxRetries: 0,
});
assert.equal(result.steps.length, 2, JSON.stringify(result.steps.map((s) => ({ finish: s.finishReason, content: s.content, req: s.request?.body }))));
assert.equal(executed, 1);
assert.equal(result.steps[0].toolCalls.length, 1);
assert.equal(result.steps[0].toolCalls[0].toolName, "get_weather");
assert.ok(cities.includes(result.steps[0].toolCalls[0].input.city));
assert.equal(result.steps[0].toolResults[0].output.temperature_c, 21);
assert.equal(result.steps[1].toolCalls.length, 0);
assert.ok(["stop", "length"].includes(result.finishReason), result.finishReason);
assert.equal(typeof result.text, "string");
console.log(`ai sdk: ${result.steps.length} steps, call ${JSON.stringify(result.steps[0].toolCalls[0].input)}, answer of ${result.text.length} characters`);
console.log("tools e2e: all checks passed");
