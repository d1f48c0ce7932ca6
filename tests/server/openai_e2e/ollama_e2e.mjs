// Ollama end to end through the official ollama client: list / ps / show / version, chat (plain
// and streamed), chat with tools streamed (one call forced with strata's tool_choice and
// parallel_tool_calls extensions),
// generate, and the client's ResponseError.
// Needs STRATA_URL (http://host:port); STRATA_API_KEY optional (sent as a bearer token).
import { Ollama } from "ollama";
import assert from "node:assert/strict";

const host = process.env.STRATA_URL;
if (!host) {
  console.error("set STRATA_URL, e.g. http://127.0.0.1:8080");
  process.exit(2);
}
const ollama = new Ollama({ host, headers: { Authorization: `Bearer ${process.env.STRATA_API_KEY || "none"}` } });

const list = await ollama.list();
assert.equal(list.models.length, 1);
const model = list.models[0].name;
assert.equal((await ollama.ps()).models[0].name, model);
assert.equal(typeof (await ollama.show({ model })).template, "string");
assert.equal(typeof (await ollama.version()).version, "string");
console.log(`model: ${model}`);

// Plain chat, then the same streamed (greedy: the same text).
const messages = [{ role: "user", content: "Tell me a story" }];
const options = { temperature: 0, num_predict: 8 };
const whole = await ollama.chat({ model, messages, options, stream: false });
assert.equal(whole.done, true);
assert.equal(whole.message.role, "assistant");
let text = "";
let last;
for await (const part of await ollama.chat({ model, messages, options, stream: true })) {
  text += part.message.content;
  last = part;
}
assert.equal(last.done, true);
assert.equal(text, whole.message.content);
assert.equal(last.eval_count, whole.eval_count);
console.log(`chat: ${JSON.stringify(text)} (${last.eval_count} tokens, ${last.done_reason})`);
// Timings measured on the engine thread (ns).
for (const r of [whole, last]) {
  assert.ok(r.prompt_eval_count > 0 && r.prompt_eval_duration > 0, JSON.stringify(r));
  assert.ok(r.eval_count > 0 && r.eval_duration > 0, JSON.stringify(r));
  assert.ok(r.total_duration >= r.load_duration + r.prompt_eval_duration + r.eval_duration, JSON.stringify(r));
}
// No messages: Ollama's load request.
const load = await ollama.chat({ model, messages: [], stream: false });
assert.equal(load.done, true);
assert.equal(load.done_reason, "load");

// Tools, streamed: the call arrives whole, arguments as an object.
const cities = ["Paris", "Oslo", "Lima"];
const tools = [{ type: "function", function: { name: "get_weather", description: "Current weather of a city",
  parameters: { type: "object", properties: { city: { type: "string", enum: cities } }, required: ["city"], additionalProperties: false } } }];
const calls = [];
for await (const part of await ollama.chat({ model, messages: [{ role: "user", content: "Weather in Paris?" }], tools, stream: true,
                                             tool_choice: "required", parallel_tool_calls: false, options: { num_predict: 300, temperature: 0 } }))
  calls.push(...(part.message.tool_calls || []));
assert.ok(calls.length >= 1, "no tool call");
assert.equal(calls[0].function.name, "get_weather");
assert.ok(cities.includes(calls[0].function.arguments.city), JSON.stringify(calls[0]));
console.log(`tool call: ${JSON.stringify(calls[0].function)}`);
// The call and its result go back; the reply is text.
const after = await ollama.chat({ model, tools, stream: false, options,
  messages: [{ role: "user", content: "Weather in Paris?" }, { role: "assistant", content: "", tool_calls: [calls[0]] },
             { role: "tool", content: "21 C", tool_name: "get_weather" }], tool_choice: "none" });
assert.equal(after.message.tool_calls, undefined);

const gen = await ollama.generate({ model, prompt: "Hello", options: { num_predict: 4 }, stream: false });
assert.equal(gen.done, true);
assert.equal(typeof gen.response, "string");

await assert.rejects(ollama.chat({ model, messages: [{ role: "user", content: "x", images: ["aGk="] }], stream: false }), (e) => {
  assert.equal(e.name, "ResponseError", String(e));
  assert.equal(e.status_code, 400);
  assert.match(e.error, /images/);
  return true;
});
console.log("ollama e2e: all checks passed");
