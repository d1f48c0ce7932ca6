// strata serve through the official openai client: chat (plain and streamed, with usage),
// completions, a stop sequence, and an error case. Needs STRATA_BASE_URL (http://host:port/v1);
// STRATA_API_KEY and STRATA_MODEL are optional.
import OpenAI from "openai";
import assert from "node:assert/strict";

const baseURL = process.env.STRATA_BASE_URL;
if (!baseURL) {
  console.error("set STRATA_BASE_URL, e.g. http://127.0.0.1:8080/v1");
  process.exit(2);
}
const apiKey = process.env.STRATA_API_KEY || "none";
const client = new OpenAI({ baseURL, apiKey, maxRetries: 0, timeout: 60_000 });

const models = await client.models.list();
const ids = [];
for await (const m of models) ids.push(m.id);
assert.ok(ids.length >= 1, "no models listed");
const model = process.env.STRATA_MODEL || ids[0];
console.log(`models: ${ids.join(", ")}`);

const messages = [
  { role: "system", content: "You are terse." },
  { role: "user", content: "Name three colours." },
];

// 1. Non-streaming chat.
const chat = await client.chat.completions.create({ model, messages, max_tokens: 12, temperature: 0, ignore_eos: true });
assert.equal(chat.object, "chat.completion");
assert.equal(chat.choices[0].message.role, "assistant");
assert.equal(typeof chat.choices[0].message.content, "string");
assert.equal(chat.choices[0].finish_reason, "length");
assert.equal(chat.usage.completion_tokens, 12);
assert.equal(chat.usage.total_tokens, chat.usage.prompt_tokens + chat.usage.completion_tokens);
assert.equal(chat.usage.prompt_tokens_details.cached_tokens, 0, "first request: nothing to reuse");
assert.equal(chat.choices[0].message.refusal, null, "message.refusal is required (null)");
console.log(`chat: ${JSON.stringify(chat.choices[0].message.content)} usage ${JSON.stringify(chat.usage)}`);

// 2. Streaming chat with usage: same greedy text.
const stream = await client.chat.completions.create({
  model, messages, max_tokens: 12, temperature: 0, ignore_eos: true, stream: true, stream_options: { include_usage: true },
});
let text = "", finish = null, usage = null, chunks = 0;
let usageNulls = 0;
for await (const chunk of stream) {
  chunks++;
  if (chunk.usage) usage = chunk.usage;
  else if (chunk.usage === null) usageNulls++;
  else assert.fail(`chunk ${chunks} has no usage field (include_usage: null before the last)`);
  for (const ch of chunk.choices) {
    if (ch.delta?.content) text += ch.delta.content;
    if (ch.finish_reason) finish = ch.finish_reason;
  }
}
assert.equal(text, chat.choices[0].message.content, "streamed text differs from the non-streamed one");
assert.equal(finish, "length");
// Same prompt again: its slot kept all but the last two prompt tokens.
const { prompt_tokens_details, ...counts } = usage;
const { prompt_tokens_details: _, ...chatCounts } = chat.usage;
assert.deepEqual(counts, chatCounts);
assert.equal(prompt_tokens_details.cached_tokens, chat.usage.prompt_tokens - 2);
assert.equal(usageNulls, chunks - 1, "every chunk but the last has usage: null");
console.log(`stream: ${chunks} chunks, same text, usage ok`);

// 3. Completions.
const cmpl = await client.completions.create({ model, prompt: "The quick brown fox", max_tokens: 16, temperature: 0, ignore_eos: true });
assert.equal(cmpl.object, "text_completion");
assert.equal(cmpl.usage.completion_tokens, 16);
const full = cmpl.choices[0].text;
console.log(`completion: ${JSON.stringify(full)}`);

// 3b. echo puts the prompt first, with logprobs its tokens' first (the first one null); several
// prompts give one choice each, in order, each the text of its prompt alone.
const echoed = await client.completions.create({ model, prompt: "The quick brown fox", max_tokens: 16, temperature: 0, ignore_eos: true, echo: true, logprobs: 1 });
assert.equal(echoed.choices[0].text, "The quick brown fox" + full);
assert.equal(echoed.choices[0].logprobs.token_logprobs[0], null);
assert.equal(echoed.choices[0].logprobs.tokens.join(""), echoed.choices[0].text);
const other = await client.completions.create({ model, prompt: "Once upon a time", max_tokens: 16, temperature: 0, ignore_eos: true });
const both = await client.completions.create({ model, prompt: ["The quick brown fox", "Once upon a time"], max_tokens: 16, temperature: 0, ignore_eos: true });
assert.deepEqual(both.choices.map((c) => [c.index, c.text]), [[0, full], [1, other.choices[0].text]]);
assert.equal(both.usage.prompt_tokens, cmpl.usage.prompt_tokens + other.usage.prompt_tokens);
console.log(`echo and two prompts ok`);

// 4. A stop sequence taken from the greedy text: output ends right before it.
const m = /[A-Za-z]{3}/.exec(full.slice(3));
assert.ok(m, `no ASCII run to stop on in ${JSON.stringify(full)}`);
const stop = m[0];
const stopped = await client.completions.create({ model, prompt: "The quick brown fox", max_tokens: 16, temperature: 0, ignore_eos: true, stop: [stop] });
assert.equal(stopped.choices[0].text, full.slice(0, full.indexOf(stop)));
assert.equal(stopped.choices[0].finish_reason, "stop");
console.log(`stop ${JSON.stringify(stop)}: ${JSON.stringify(stopped.choices[0].text)}`);

// 5. Errors come back as APIError with the status and the error object.
try {
  await client.chat.completions.create({ model: "no-such-model", messages, max_tokens: 1 });
  assert.fail("expected a 404");
} catch (e) {
  assert.ok(e instanceof OpenAI.APIError, `not an APIError: ${e}`);
  assert.equal(e.status, 404);
  assert.equal(e.code, "model_not_found");
  console.log(`error: ${e.status} ${e.code}`);
}
try {
  await client.chat.completions.create({ model, messages, temperature: 9 });
  assert.fail("expected a 400");
} catch (e) {
  assert.equal(e.status, 400);
  assert.equal(e.param, "temperature");
}
if (process.env.STRATA_API_KEY) {
  const bad = new OpenAI({ baseURL, apiKey: "wrong", maxRetries: 0 });
  await assert.rejects(bad.models.list(), (e) => e.status === 401);
}
console.log("openai e2e: all checks passed");
