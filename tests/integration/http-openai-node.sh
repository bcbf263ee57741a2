#!/bin/bash
# SPDX-License-Identifier: MIT
# The official `openai` npm package against a real mollyd: models.list, completions and chat
# completions, streamed and not (the streamed text must equal the non-streamed greedy text),
# stream_options.include_usage, and the SDK's typed errors for 401, 403, 404 and 400.
# The package is installed with npm into the test's temporary folder; without node, npm or a
# reachable registry the test is skipped (exit 77) with the reason.
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

KEY=molly-$(python3 -c 'import base64, os; print(base64.urlsafe_b64encode(os.urandom(32)).decode().rstrip("="))')
HASH=$(python3 -c 'import hashlib, sys; print("sha256:" + hashlib.sha256(sys.argv[1].encode()).hexdigest())' "$KEY")
# an adapter outside the key's scope, for the 403
ADAPTER=$HT_SHARED/models/stories260K-lora-attn-r8.gguf
LOAD=
if [ -f "$ADAPTER" ]; then
	mkdir -p "$HT_TMP/state/adapters"
	cp "$ADAPTER" "$HT_TMP/state/adapters/attn.gguf"
	LOAD="[Adapters]
Load=attn"
fi
ht_config "[Member sdk]
KeyHash=$HASH
Models=$HT_NAME

$LOAD"
ht_start

cat >"$HT_TMP/npm/check.js" <<'JS'
const assert = require("assert");
const mod = require("openai");
const OpenAI = mod.OpenAI || mod.default || mod;
const [url, key, base, adapter] = process.argv.slice(2);
const client = new OpenAI({ baseURL: url + "/v1", apiKey: key, maxRetries: 0, timeout: 60000 });

async function expectError(status, fn, what) {
	try {
		await fn();
	} catch (e) {
		assert.strictEqual(e.status, status, `${what}: status ${e.status}: ${e.message}`);
		assert.ok(e instanceof OpenAI.APIError, `${what}: not an APIError`);
		return e;
	}
	assert.fail(`${what}: no error`);
}

(async () => {
	const ids = [];
	for await (const m of client.models.list()) ids.push(m.id);
	assert.deepStrictEqual(ids, [base]);
	console.log("ok - models.list");

	const req = { model: base, prompt: "Once upon a time", max_tokens: 20, temperature: 0 };
	const c = await client.completions.create(req);
	assert.ok(c.id.startsWith("cmpl-"));
	assert.strictEqual(c.object, "text_completion");
	assert.ok(c.choices[0].text.length > 0);
	assert.ok(["length", "stop"].includes(c.choices[0].finish_reason));
	assert.strictEqual(c.usage.total_tokens, c.usage.prompt_tokens + c.usage.completion_tokens);
	let text = "";
	for await (const chunk of await client.completions.create({ ...req, stream: true }))
		text += chunk.choices[0]?.text ?? "";
	assert.strictEqual(text, c.choices[0].text);
	console.log("ok - completions.create, streamed and not");

	const chat = { model: base, messages: [{ role: "user", content: "Tell me a story." }],
		       max_tokens: 16, temperature: 0 };
	const r = await client.chat.completions.create(chat);
	assert.strictEqual(r.object, "chat.completion");
	assert.strictEqual(r.choices[0].message.role, "assistant");
	const want = r.choices[0].message.content;
	let got = "", usage = null, role = null;
	const stream = await client.chat.completions.create({ ...chat, stream: true,
		stream_options: { include_usage: true } });
	for await (const chunk of stream) {
		if (chunk.usage) usage = chunk.usage;
		const d = chunk.choices[0]?.delta;
		if (d?.role) role = d.role;
		got += d?.content ?? "";
	}
	assert.strictEqual(got, want);
	assert.strictEqual(role, "assistant");
	assert.strictEqual(usage.completion_tokens, r.usage.completion_tokens);
	console.log("ok - chat.completions.create, streamed (include_usage) and not");

	const e404 = await expectError(404, () => client.completions.create({ ...req, model: "nope" }),
				       "unknown model");
	assert.ok(e404 instanceof OpenAI.NotFoundError);
	assert.strictEqual(e404.code, "model_not_found");
	const e400 = await expectError(400, () => client.completions.create({ ...req, max_tokens: "x" }),
				       "bad max_tokens");
	assert.ok(e400 instanceof OpenAI.BadRequestError);
	assert.strictEqual(e400.param, "max_tokens");
	const bad = new OpenAI({ baseURL: url + "/v1", apiKey: "molly-wrong", maxRetries: 0 });
	const e401 = await expectError(401, () => bad.models.list(), "wrong key");
	assert.ok(e401 instanceof OpenAI.AuthenticationError);
	if (adapter) {
		const e403 = await expectError(403, () => client.completions.create({ ...req,
			model: adapter }), "outside Models=");
		assert.ok(e403 instanceof OpenAI.PermissionDeniedError);
	}
	console.log("ok - typed errors: 404 NotFoundError, 400 BadRequestError, 401" +
		    (adapter ? ", 403 PermissionDeniedError" : ""));
})().catch((e) => {
	console.error("FAIL:", e && e.stack ? e.stack : e);
	process.exit(1);
});
JS
(cd "$HT_TMP/npm" && timeout "$MOLLY_TEST_WAIT_S" node check.js "$HT_URL" "$KEY" "$HT_NAME" ${LOAD:+attn}) ||
	ht_fail "the openai package's checks failed"
ht_stop 30
[ "$HT_EXIT" = 0 ] || ht_fail "mollyd exited with $HT_EXIT"
