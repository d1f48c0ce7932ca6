// Anthropic Messages end to end through the official @anthropic-ai/sdk: messages.create,
// messages.stream().finalMessage() with a forced tool call (tool_choice {type: "tool"}) whose
// input validates against the schema, countTokens, and the SDK's error classes.
// Needs STRATA_URL (http://host:port); STRATA_API_KEY optional (sent as x-api-key).
// The server's model has random weights: constrained decoding is what makes the call valid.
import Anthropic from "@anthropic-ai/sdk";
import assert from "node:assert/strict";

const baseURL = process.env.STRATA_URL;
if (!baseURL) {
  console.error("set STRATA_URL, e.g. http://127.0.0.1:8080");
  process.exit(2);
}
const client = new Anthropic({ baseURL, apiKey: process.env.STRATA_API_KEY || "none", maxRetries: 0, timeout: 120_000 });
const model = "claude-sonnet-4-5";  // any name: one model is served
const cities = ["Paris", "Oslo", "Lima"];
const weather = {
  name: "get_weather",
  description: "Current weather of a city",
  input_schema: { type: "object", properties: { city: { type: "string", enum: cities }, days: { type: "integer", enum: [1, 2, 3] } },
                  required: ["city", "days"], additionalProperties: false },
};
const messages = [{ role: "user", content: "What is the weather in Oslo?" }];

// 1. A plain reply.
const plain = await client.messages.create({ model, max_tokens: 8, system: "Be brief.", messages, temperature: 0 });
assert.equal(plain.type, "message");
assert.equal(plain.role, "assistant");
assert.ok(plain.id.startsWith("msg_"), plain.id);
assert.equal(plain.content[0].type, "text");
assert.ok(["end_turn", "max_tokens"].includes(plain.stop_reason), plain.stop_reason);
assert.ok(plain.usage.input_tokens > 0 && plain.usage.output_tokens > 0, JSON.stringify(plain.usage));
const counted = await client.messages.countTokens({ model, system: "Be brief.", messages });
assert.equal(counted.input_tokens, plain.usage.input_tokens);
console.log(`create: ${plain.usage.output_tokens} tokens, stop ${plain.stop_reason}; count_tokens ${counted.input_tokens}`);

// 2. A forced tool call: a tool_use block whose input is a non-empty object matching the schema.
const forced = { model, max_tokens: 300, messages, tools: [weather], tool_choice: { type: "tool", name: "get_weather", disable_parallel_tool_use: true },
                 temperature: 0 };  // greedy: the same call every run
function checkCall(m) {
  assert.equal(m.stop_reason, "tool_use", JSON.stringify(m));
  const uses = m.content.filter((b) => b.type === "tool_use");
  assert.equal(uses.length, 1, JSON.stringify(m.content));
  assert.equal(uses[0].name, "get_weather");
  assert.ok(uses[0].id.startsWith("toolu_"), uses[0].id);
  assert.ok(Object.keys(uses[0].input).length > 0, JSON.stringify(uses[0].input));
  assert.ok(cities.includes(uses[0].input.city), JSON.stringify(uses[0].input));
  assert.ok([1, 2, 3].includes(uses[0].input.days), JSON.stringify(uses[0].input));
  return uses[0];
}
const whole = await client.messages.create(forced);
const call = checkCall(whole);
console.log(`tool_use: ${JSON.stringify(call.input)}`);

// 2b. Cut off by max_tokens inside the call: stop_reason max_tokens, the call as a tool_use block
// (input: as far as it parses), no text block with the call's syntax.
const cut = await client.messages.create({ ...forced, max_tokens: whole.usage.output_tokens - 1 });
assert.equal(cut.stop_reason, "max_tokens", JSON.stringify(cut));
assert.ok(!cut.content.some((b) => b.type === "text" && b.text.length > 0), JSON.stringify(cut.content));
const cutUse = cut.content.find((b) => b.type === "tool_use");
assert.equal(cutUse.name, "get_weather");
assert.equal(typeof cutUse.input, "object");
const cutStreamed = await client.messages.stream({ ...forced, max_tokens: whole.usage.output_tokens - 1 }).finalMessage();
assert.equal(cutStreamed.stop_reason, "max_tokens");
assert.equal(cutStreamed.content.find((b) => b.type === "tool_use").name, "get_weather");
console.log(`cut tool_use: ${JSON.stringify(cutUse.input)}`);

// 3. Streaming: the SDK rebuilds the message (input from input_json_delta events).
const stream = client.messages.stream(forced);
const seen = new Set();
stream.on("streamEvent", (e) => seen.add(e.type));
const final = await stream.finalMessage();
const streamed = checkCall(final);
for (const t of ["message_start", "content_block_start", "content_block_delta", "content_block_stop", "message_delta", "message_stop"])
  assert.ok(seen.has(t), `no ${t} event (saw ${[...seen]})`);
console.log(`stream: finalMessage tool_use ${JSON.stringify(streamed.input)}`);

// 4. The tool result goes back; the reply is text (tool_choice none).
const answer = await client.messages.create({
  model, max_tokens: 8, tools: [weather], tool_choice: { type: "none" },
  messages: [...messages, { role: "assistant", content: [{ type: "tool_use", id: call.id, name: call.name, input: call.input }] },
             { role: "user", content: [{ type: "tool_result", tool_use_id: call.id, content: "21 C, clear" }] }],
});
assert.notEqual(answer.stop_reason, "tool_use");
assert.equal(answer.content[0].type, "text");

// 5. Errors: the SDK's classes with Anthropic's error object.
await assert.rejects(client.messages.create({ model, messages }), (e) => {
  assert.ok(e instanceof Anthropic.BadRequestError, String(e));
  assert.equal(e.error.type, "error");
  assert.equal(e.error.error.type, "invalid_request_error");
  assert.match(e.error.error.message, /max_tokens/);
  return true;
});
const wrong = new Anthropic({ baseURL, apiKey: "wrong-key", maxRetries: 0 });
await assert.rejects(wrong.messages.create({ model, max_tokens: 1, messages }), (e) => e instanceof Anthropic.AuthenticationError);
console.log("anthropic e2e: all checks passed");
