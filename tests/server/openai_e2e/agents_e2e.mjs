// The OpenAI Agents SDK (@openai/agents, Responses API) running an agent with two function tools
// to completion against strata. The model has random weights, so its free text would run to the
// token limit (a "response.incomplete" the SDK rejects): every turn's tool choice is "required"
// (constrained decoding makes each call valid; resetToolChoice off), each tool is enabled until it
// has run (isEnabled: a random model would pick the same one every turn), and the agent's
// toolUseBehavior ends the run with the tools' outputs once both have run.
// Needs STRATA_BASE_URL (http://host:port/v1); STRATA_API_KEY optional.
import { Agent, run, tool, setDefaultOpenAIClient, setOpenAIAPI, setTracingDisabled } from "@openai/agents";
import OpenAI from "openai";
import { z } from "zod";
import assert from "node:assert/strict";

const baseURL = process.env.STRATA_BASE_URL;
if (!baseURL) {
  console.error("set STRATA_BASE_URL, e.g. http://127.0.0.1:8080/v1");
  process.exit(2);
}
setTracingDisabled(true);
setDefaultOpenAIClient(new OpenAI({ baseURL, apiKey: process.env.STRATA_API_KEY || "none", maxRetries: 0, timeout: 120_000 }));
setOpenAIAPI("responses");

const cities = ["Paris", "Oslo", "Lima"];
const ran = [];
const getWeather = tool({ name: "get_weather", description: "Current weather of a city", parameters: z.object({ city: z.enum(cities) }),
  isEnabled: () => !ran.some(([n]) => n === "get_weather"),
  execute: async ({ city }) => { ran.push(["get_weather", city]); return `${city}: 21 C, clear`; } });
const getTime = tool({ name: "get_time", description: "Local time in a city", parameters: z.object({ city: z.enum(cities) }),
  isEnabled: () => !ran.some(([n]) => n === "get_time"),
  execute: async ({ city }) => { ran.push(["get_time", city]); return `${city}: 14:05`; } });
const agent = new Agent({
  name: "Assistant",
  instructions: "Answer with the tools.",
  model: "strata",
  tools: [getWeather, getTime],
  modelSettings: { toolChoice: "required", parallelToolCalls: false, maxTokens: 200, temperature: 1, providerData: { seed: 11 } },
  resetToolChoice: false,
  toolUseBehavior: async () => {
    const names = new Set(ran.map(([n]) => n));
    return names.size === 2 ? { isFinalOutput: true, isInterrupted: undefined, finalOutput: ran.map(([n, c]) => `${n}(${c})`).join(", ") }
                            : { isFinalOutput: false, isInterrupted: undefined };
  },
});
const result = await run(agent, "What are the weather and the time in Oslo?", { maxTurns: 4 });
assert.deepEqual(new Set(ran.map(([n]) => n)), new Set(["get_weather", "get_time"]));
for (const [name, city] of ran) assert.ok(["get_weather", "get_time"].includes(name) && cities.includes(city), `${name} ${city}`);
assert.equal(typeof result.finalOutput, "string");
const outputs = result.newItems.filter((i) => i.type === "tool_call_output_item");
assert.equal(outputs.length, ran.length);
console.log(`agents: ${ran.map(([n, c]) => `${n}(${c})`).join(", ")}, final output of ${result.finalOutput.length} characters`);
console.log("agents e2e: all checks passed");
