#!/bin/bash
# SPDX-License-Identifier: MIT
# Issue #21 with the official `openai` npm package against a real mollyd (mistral template, so
# tool prompts fit the 512-token test model): response_format json_schema streamed and not
# (greedy: the same text; it parses and has the schema's shape), tools with tool_choice
# "required" (message.tool_calls, finish_reason "tool_calls"), the SDK's stream helper
# assembling a streamed tool call from its deltas, and a BadRequestError naming the schema
# field for an unsupported keyword. Skipped (77) without node, npm or a reachable registry.
. "$(dirname "$0")/lib/http.sh"

command -v node >/dev/null || ht_skip "node is not installed"
command -v npm >/dev/null || ht_skip "npm is not installed"
PKG=${MOLLY_OPENAI_NPM:-openai@6}
mkdir -p "$HT_TMP/npm"
if ! (cd "$HT_TMP/npm" && echo '{"private": true}' >package.json &&
	timeout 180 npm install --no-audit --no-fund --silent "$PKG" >"$HT_TMP/npm.log" 2>&1); then
	tail -n 5 "$HT_TMP/npm.log" >&2
	ht_skip "npm could not install $PKG (no registry?)"
fi
echo "using openai $(cd "$HT_TMP/npm" && node -p 'require("./node_modules/openai/package.json").version')"

ht_config ""
sed -i 's/^Threads=1/Threads=1\nChatTemplate=mistral/' "$HT_TMP/mollyd.conf"
ht_start

cat >"$HT_TMP/npm/check.js" <<'JS'
const assert = require("assert");
const mod = require("openai");
const OpenAI = mod.OpenAI || mod.default || mod;
const [url, base] = process.argv.slice(2);
const client = new OpenAI({ baseURL: url + "/v1", apiKey: "unused", maxRetries: 0, timeout: 60000 });

const schema = {
	type: "object",
	properties: {
		title: { type: "string", maxLength: 16 },
		year: { type: "integer", minimum: 1900, maximum: 2100 },
		genre: { enum: ["drama", "comedy"] },
	},
	required: ["title", "year", "genre"],
	additionalProperties: false,
};
const tools = [{ type: "function", function: { name: "get_weather", description: "Weather",
	parameters: { type: "object", properties: { city: { type: "string", maxLength: 10 } },
		      required: ["city"], additionalProperties: false } } }];

function checkMovie(text) {
	const m = JSON.parse(text);
	assert.deepStrictEqual(Object.keys(m).sort(), ["genre", "title", "year"]);
	assert.ok(typeof m.title === "string" && [...m.title].length <= 16);
	assert.ok(Number.isInteger(m.year) && m.year >= 1900 && m.year <= 2100);
	assert.ok(["drama", "comedy"].includes(m.genre));
}

(async () => {
	const req = { model: base, messages: [{ role: "user", content: "A movie?" }], max_tokens: 120,
		      temperature: 0, response_format: { type: "json_schema",
		      json_schema: { name: "movie", strict: true, schema } } };
	const r = await client.chat.completions.create(req);
	assert.strictEqual(r.choices[0].finish_reason, "stop");
	checkMovie(r.choices[0].message.content);
	let text = "";
	for await (const chunk of await client.chat.completions.create({ ...req, stream: true }))
		text += chunk.choices[0]?.delta?.content ?? "";
	assert.strictEqual(text, r.choices[0].message.content);
	console.log("ok - response_format json_schema, streamed and not: " + text);

	const t = await client.chat.completions.create({ model: base, max_tokens: 100, seed: 2,
		messages: [{ role: "user", content: "Weather in Rome?" }], tools,
		tool_choice: "required" });
	assert.strictEqual(t.choices[0].finish_reason, "tool_calls");
	const call = t.choices[0].message.tool_calls[0];
	assert.strictEqual(call.type, "function");
	assert.strictEqual(call.function.name, "get_weather");
	assert.ok(typeof JSON.parse(call.function.arguments).city === "string");
	console.log("ok - tools, tool_choice required: " + call.function.arguments);

	const runner = client.chat.completions.stream({ model: base, max_tokens: 100, seed: 3,
		messages: [{ role: "user", content: "Weather?" }], tools,
		tool_choice: { type: "function", function: { name: "get_weather" } } });
	const done = await runner.finalChatCompletion();
	const sc = done.choices[0].message.tool_calls[0];
	assert.strictEqual(done.choices[0].finish_reason, "tool_calls");
	assert.strictEqual(sc.function.name, "get_weather");
	assert.ok(typeof JSON.parse(sc.function.arguments).city === "string");
	console.log("ok - streamed tool call assembled by the SDK: " + sc.function.arguments);

	/* the conversation goes on with the call and its result */
	const next = await client.chat.completions.create({ model: base, max_tokens: 5, tools,
		messages: [{ role: "user", content: "Weather?" }, done.choices[0].message,
			   { role: "tool", tool_call_id: sc.id, content: "sunny" }] });
	assert.ok(["stop", "length", "tool_calls"].includes(next.choices[0].finish_reason));
	console.log("ok - tool result accepted");

	try {
		await client.chat.completions.create({ ...req, response_format: { type: "json_schema",
			json_schema: { name: "x", schema: { type: "string", pattern: "^a" } } } });
		assert.fail("no error");
	} catch (e) {
		assert.ok(e instanceof OpenAI.BadRequestError, String(e));
		assert.strictEqual(e.param, "response_format.json_schema.schema");
		assert.ok(e.message.includes("'pattern'"), e.message);
	}
	console.log("ok - unsupported keyword: BadRequestError naming it");
})().catch((e) => {
	console.error("FAIL:", e && e.stack ? e.stack : e);
	process.exit(1);
});
JS
(cd "$HT_TMP/npm" && timeout "$MOLLY_TEST_WAIT_S" node check.js "$HT_URL" "$HT_NAME") ||
	ht_fail "the openai package's checks failed"
ht_stop 30
[ "$HT_EXIT" = 0 ] || ht_fail "mollyd exited with $HT_EXIT"
