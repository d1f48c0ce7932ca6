// OpenAI Responses end to end through the official openai client: responses.create (text,
// forced function call, json_schema text format, a function_call_output round trip), streaming
// events, and the stateless 400.
// Needs STRATA_BASE_URL (http://host:port/v1); STRATA_API_KEY optional.
import OpenAI from "openai";
import assert from "node:assert/strict";

const baseURL = process.env.STRATA_BASE_URL;
if (!baseURL) {
  console.error("set STRATA_BASE_URL, e.g. http://127.0.0.1:8080/v1");
  process.exit(2);
}
const client = new OpenAI({ baseURL, apiKey: process.env.STRATA_API_KEY || "none", maxRetries: 0, timeout: 120_000 });
const model = "gpt-5";  // any name: one model is served
const cities = ["Paris", "Oslo", "Lima"];
const weather = { type: "function", name: "get_weather", description: "Current weather of a city", strict: true,
                  parameters: { type: "object", properties: { city: { type: "string", enum: cities } }, required: ["city"], additionalProperties: false } };

// 1. Text.
const r = await client.responses.create({ model, instructions: "Be brief.", input: "Hello", max_output_tokens: 8, temperature: 0 });
assert.equal(r.object, "response");
assert.ok(r.id.startsWith("resp_"), r.id);
const msg = r.output.find((o) => o.type === "message");
assert.ok(msg.id.startsWith("msg_"), msg.id);
assert.equal(typeof r.output_text, "string");
assert.equal(r.output_text, msg.content[0].text);
assert.ok(r.usage.input_tokens > 0 && r.usage.output_tokens > 0);
console.log(`create: ${JSON.stringify(r.output_text)} (${r.status})`);

// 2. Streaming the same request: deltas add up to the same text, numbered events.
const events = [];
for await (const e of await client.responses.create({ model, instructions: "Be brief.", input: "Hello", max_output_tokens: 8, temperature: 0, stream: true }))
  events.push(e);
assert.equal(events[0].type, "response.created");
assert.ok(["response.completed", "response.incomplete"].includes(events.at(-1).type));
events.forEach((e, i) => assert.equal(e.sequence_number, i));
const text = events.filter((e) => e.type === "response.output_text.delta").map((e) => e.delta).join("");
assert.equal(text, r.output_text);
assert.equal(events.find((e) => e.type === "response.output_text.done").text, text);
console.log(`stream: ${events.length} events, same text`);

// 3. A forced function call, streamed through responses.stream(): arguments from the deltas.
const forced = { model, input: [{ role: "user", content: "Weather in Lima?" }], tools: [weather], tool_choice: "required", parallel_tool_calls: false,
                 max_output_tokens: 300, temperature: 0 };  // greedy: the same call every run
const s = client.responses.stream(forced);
let deltas = "";
s.on("response.function_call_arguments.delta", (e) => { deltas += e.delta; });
const fr = await s.finalResponse();
const call = fr.output.find((o) => o.type === "function_call");
assert.ok(call, JSON.stringify(fr.output));
assert.ok(call.id.startsWith("fc_"), call.id);
assert.equal(call.name, "get_weather");
assert.equal(call.arguments, deltas);
assert.ok(cities.includes(JSON.parse(call.arguments).city), call.arguments);
console.log(`function_call: ${call.arguments}`);
const argsDone = [];
const s2 = client.responses.stream(forced);
s2.on("response.function_call_arguments.done", (e) => argsDone.push(e));
await s2.finalResponse();
assert.equal(argsDone.length, 1);
assert.equal(argsDone[0].name, "get_weather", "function_call_arguments.done names the function");

// 3b. Cut off at max_output_tokens: the response and its message item are incomplete.
const cutText = await client.responses.create({ model, input: "Tell me a long story", max_output_tokens: 3, temperature: 0 });
assert.equal(cutText.status, "incomplete");
assert.equal(cutText.incomplete_details.reason, "max_output_tokens");
assert.equal(cutText.output.find((o) => o.type === "message").status, "incomplete");

// 4. The call's output goes back as items; the reply is text.
const back = await client.responses.create({ model, max_output_tokens: 8, tools: [weather], tool_choice: "none",
  input: [...forced.input, { type: "function_call", call_id: call.call_id, name: call.name, arguments: call.arguments },
          { type: "function_call_output", call_id: call.call_id, output: "21 C, clear" }] });
assert.equal(back.output.filter((o) => o.type === "function_call").length, 0);
assert.equal(typeof back.output_text, "string");

// 5. text.format json_schema: JSON that validates.
const colours = ["red", "green", "blue"];
const js = await client.responses.create({ model, input: "Pick a colour", max_output_tokens: 200, temperature: 0,
  text: { format: { type: "json_schema", name: "pick", strict: true,
    schema: { type: "object", properties: { colour: { type: "string", enum: colours } }, required: ["colour"], additionalProperties: false } } } });
assert.ok(colours.includes(JSON.parse(js.output_text).colour), js.output_text);
console.log(`json_schema: ${js.output_text}`);

// 6. Stateless: previous_response_id is a 400 naming it.
await assert.rejects(client.responses.create({ model, input: "more", previous_response_id: r.id }), (e) => {
  assert.equal(e.status, 400);
  assert.equal(e.param, "previous_response_id");
  return true;
});
console.log("responses e2e: all checks passed");
